package moleculetest

import "slices"

// Calls returns every recorded call in arrival order (including refused and failed ones).
func (p *Platform) Calls() []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

// CallsTo returns the recorded calls of one route.
func (p *Platform) CallsTo(route Route) []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Call
	for _, c := range p.calls {
		if c.Route == route {
			out = append(out, c)
		}
	}
	return out
}

// CountCalls counts the recorded calls of route answered with status (0: any status).
func (p *Platform) CountCalls(route Route, status int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.calls {
		if c.Route == route && (status == 0 || c.Status == status) {
			n++
		}
	}
	return n
}

// Notifies returns the accepted notify calls (the replies a canvas user saw), in order.
func (p *Platform) Notifies() []Notify {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.notifies)
}

// A2ASends returns the accepted A2A sends (the replies peers got), in order.
func (p *Platform) A2ASends() []A2ASend {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.sends)
}

// Deliveries is len(Notifies()) + len(A2ASends()).
func (p *Platform) Deliveries() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.notifies) + len(p.sends)
}

// Heartbeats returns the accepted heartbeat bodies.
func (p *Platform) Heartbeats() []map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.heartbeats)
}

// Registers returns the accepted register bodies.
func (p *Platform) Registers() []map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.registers)
}

// Acks returns the accepted acked_seq values.
func (p *Platform) Acks() []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.acks)
}
