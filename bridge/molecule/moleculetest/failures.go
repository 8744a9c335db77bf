package moleculetest

// FailNext makes the next n calls of route answer status (e.g. 502, 401, 403, 404). Calls queue
// behind failures injected earlier.
func (p *Platform) FailNext(route Route, n, status int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fail[route] = append(p.fail[route], failure{n: n, status: status})
}

// HangNext makes the next n calls of route never answer: the request hangs until the client
// gives up (its timeout) or the platform closes.
func (p *Platform) HangNext(route Route, n int) { p.FailNext(route, n, StatusHung) }

// GoneNext makes the next activity poll that uses since_id answer 410 Gone (cursor unknown).
func (p *Platform) GoneNext() { p.GoneFor(1) }

// GoneFor makes the next n activity polls that use since_id answer 410 Gone, as a platform that
// has lost every cursor would; polls without a cursor are answered as usual.
func (p *Platform) GoneFor(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gone = n
}

// RedirectNext makes the next n calls of route answer status (a 3xx) with a Location header
// naming location.
func (p *Platform) RedirectNext(route Route, n, status int, location string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fail[route] = append(p.fail[route], failure{n: n, status: status, location: location})
}

// SetChaos makes a fraction rate of the calls of the given routes fail with status (StatusHung:
// hang), chosen by the seeded random source. rate 0 turns it off.
func (p *Platform) SetChaos(rate float64, status int, routes ...Route) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.chaosRate, p.chaosCode = rate, status
	p.chaosOn = make(map[Route]bool, len(routes))
	for _, r := range routes {
		p.chaosOn[r] = true
	}
}

// ClearFailures drops every injected failure not yet used, and chaos.
func (p *Platform) ClearFailures() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fail = make(map[Route][]failure)
	p.gone = 0
	p.chaosRate = 0
}
