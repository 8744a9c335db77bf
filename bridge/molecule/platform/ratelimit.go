package platform

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The platform limits requests per bucket in fixed windows (middleware/ratelimit.go: 600 a
// minute by default, keyed by X-Molecule-Org-Id when sent, so the whole org shares one bucket),
// and refills the whole bucket at once when a window ends. Every answer carries
// X-RateLimit-Limit, -Remaining and -Reset; a 429 adds Retry-After. Reset and Retry-After are
// whole seconds, truncated: "N" means the window ends in at least N and less than N+1 seconds,
// so a client that waits exactly N comes back early and draws a 429 (MOLECULE.md section 9).
const (
	// headerSlack is what a truncated header leaves out: the wait is the header's N plus it.
	headerSlack = time.Second
	// maxJitter bounds the random wait added after a window's end, so that the daemons of an
	// org do not all come back at its first instant.
	maxJitter = 250 * time.Millisecond
	// releasePace is the least time between two calls released when the gate reopens after a
	// hold: the bucket is refilled, and a burst of held calls would spend it at once.
	releasePace = 50 * time.Millisecond
	// maxRateWait caps a wait a platform (or a proxy before it) asks for: the real window is a
	// minute, and a hostile answer must not stop the daemon for a day.
	maxRateWait = 5 * time.Minute
)

// Class says which held calls go first when the gate reopens: replies, then polls, then
// heartbeats (the platform's 180 s presence window leaves them slack), then the rest (acks, which
// only decide retention, uploads, state checks, and optional traffic).
type Class int

// Classes, lowest priority first.
const (
	ClassOther Class = iota
	ClassHeartbeat
	ClassPoll
	ClassReply
)

// rateGate holds every platform call back while the platform's rate limit is spent: one gate
// for all calls of the client, since they share the platform's bucket. It counts the budget
// itself (what the last answer said remained, less the calls sent since), so that calls at
// once do not overdraw it; it closes when the budget is spent (or, in tenant mode, down to the
// reserve left to the org's canvas users) until the window's end, and on a 429 for its
// Retry-After; both are read as at least N and under N+1 seconds, and a jitter is added. Held
// calls go out in Class order, paced by releasePace, once the gate reopens.
//
// It also lets optional traffic (the stream's reconnects beyond the first, tool chips) spend at
// most a quarter of what remains in a window: replies, acks, heartbeats and polls come first.
type rateGate struct {
	// tenant keeps a tenth of the limit for the org's canvas users (the bucket is the org's).
	tenant bool
	// jitter returns the random wait added after a window's end (nil: none).
	jitter func() time.Duration

	mu    sync.Mutex
	until time.Time // closed until then (a 429, a spent budget), jitter included
	// The budget: limit -1 is "unlimited" (dev), 0 not known yet. remaining is what the last
	// answer said less the calls sent since; windowEnd the latest the window can end.
	limit, remaining int
	windowEnd        time.Time
	inflight         int // calls sent and not answered
	// Held calls: queue in arrival order; turn is closed (and replaced) whenever the queue or
	// the gate changes; pacing says calls were held, so their release is paced from next.
	queue  []*waiter
	seq    uint64
	turn   chan struct{}
	pacing bool
	next   time.Time
	// optionalSpent and optionalDropped count optional requests in the current window and in
	// all.
	optionalSpent   int
	optionalDropped int64
	optionalTotal   int64
}

// waiter is one call waiting at the gate.
type waiter struct {
	class Class
	seq   uint64
}

// Budget is the platform's rate budget as the daemon last saw it.
type Budget struct {
	// Limit is requests per window: -1 unlimited (a dev platform), 0 not known yet.
	Limit     int       `json:"limit"`
	Remaining int       `json:"remaining"`
	ResetAt   time.Time `json:"reset_at,omitzero"`
	// OptionalSent and OptionalDropped count optional requests (stream reconnects beyond the
	// first, tool chips) sent and dropped for budget.
	OptionalSent    int64 `json:"optional_sent"`
	OptionalDropped int64 `json:"optional_dropped"`
}

// budget returns the budget as last seen.
func (g *rateGate) budget() Budget {
	g.mu.Lock()
	defer g.mu.Unlock()
	return Budget{Limit: g.limit, Remaining: g.remaining, ResetAt: g.windowEnd,
		OptionalSent: g.optionalTotal, OptionalDropped: g.optionalDropped}
}

// optional reports whether an optional request may go now, and counts it: while the budget is
// unknown or unlimited, yes; else while this window's optional requests are fewer than a
// quarter of what remains.
func (g *rateGate) optional(now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refillLocked(now)
	if g.limit > 0 && g.optionalSpent >= g.remaining/4 {
		g.optionalDropped++
		return false
	}
	g.optionalSpent++
	g.optionalTotal++
	return true
}

// refillLocked starts a new window once the last one surely ended: the whole bucket is back.
func (g *rateGate) refillLocked(now time.Time) {
	if g.windowEnd.IsZero() || now.Before(g.windowEnd) {
		return
	}
	g.optionalSpent = 0
	g.windowEnd = time.Time{}
	if g.limit > 0 {
		g.remaining = g.limit
	}
}

// windowLeft is how long until the current window refills (0 when unknown).
func (g *rateGate) windowLeft(now time.Time) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return max(g.windowEnd.Sub(now), 0)
}

// reserveLocked is what the daemon leaves in the bucket: a tenth of the limit in tenant mode.
func (g *rateGate) reserveLocked() int {
	if g.tenant && g.limit > 0 {
		return g.limit / 10
	}
	return 0
}

// note records the budget an answer's headers carry, and reports whether that spent it.
func (g *rateGate) noteLocked(h http.Header, now time.Time) (spent bool) {
	lim := strings.TrimSpace(h.Get("X-RateLimit-Limit"))
	if lim == "" {
		return false
	}
	if strings.EqualFold(lim, "unlimited") {
		g.limit = -1
		return false
	}
	n, err := strconv.Atoi(lim)
	if err != nil || n <= 0 {
		return false
	}
	g.limit = n
	g.refillLocked(now)
	end := now.Add(headerSeconds(h.Get("X-RateLimit-Reset")) + headerSlack)
	r, err := strconv.Atoi(strings.TrimSpace(h.Get("X-RateLimit-Remaining")))
	if err != nil || r < 0 {
		return false
	}
	// Calls still in flight were sent after this one's answer was made, or beside it.
	r = max(r-g.inflight, 0)
	if g.windowEnd.IsZero() || !end.Add(-headerSlack).Before(g.windowEnd) {
		// The answer is from a new window.
		g.windowEnd, g.remaining, g.optionalSpent = end, r, 0
	} else {
		g.windowEnd, g.remaining = minTime(g.windowEnd, end), min(g.remaining, r)
	}
	return g.remaining <= g.reserveLocked()
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// note records the budget an answer's headers carry.
func (g *rateGate) note(h http.Header, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.noteLocked(h, now)
}

// wait returns once a call of class may go, and counts it sent, or returns ctx's error. Calls
// go in class order (then arrival order) while the gate holds them.
func (g *rateGate) wait(ctx context.Context, class Class) error {
	g.mu.Lock()
	g.seq++
	w := &waiter{class: class, seq: g.seq}
	g.queue = append(g.queue, w)
	g.changedLocked()
	for {
		now := time.Now()
		d := g.blockedLocked(w, now)
		if ctx.Err() != nil {
			g.leaveLocked(w)
			g.mu.Unlock()
			return ctx.Err()
		}
		if d == 0 {
			g.leaveLocked(w)
			g.inflight++
			if g.limit > 0 {
				g.remaining = max(g.remaining-1, 0)
			}
			if g.pacing {
				g.next = now.Add(releasePace)
				g.pacing = len(g.queue) > 0
			}
			g.mu.Unlock()
			return nil
		}
		turn := g.turnLocked()
		g.mu.Unlock()
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-turn:
		}
		t.Stop()
		g.mu.Lock()
	}
}

// waitForever stands for "until the queue changes" (the waiter is not at its head).
const waitForever = time.Hour

// blockedLocked is how long w must wait yet (0: it may go now).
func (g *rateGate) blockedLocked(w *waiter, now time.Time) time.Duration {
	if d := g.until.Sub(now); d > 0 {
		g.pacing = true
		return d
	}
	g.refillLocked(now)
	if g.limit > 0 && g.remaining <= g.reserveLocked() {
		if g.windowEnd.IsZero() {
			// Spent, and no answer said when the window ends: wait for one.
			g.windowEnd = now.Add(time.Minute)
		}
		if g.until.Before(g.windowEnd) {
			g.until = g.windowEnd.Add(g.jitterOf())
		}
		g.pacing = true
		return g.until.Sub(now)
	}
	if g.head() != w {
		return waitForever
	}
	if g.pacing {
		if d := g.next.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// head is the queued call to go first: the highest class, then the oldest.
func (g *rateGate) head() *waiter {
	var h *waiter
	for _, w := range g.queue {
		if h == nil || w.class > h.class || (w.class == h.class && w.seq < h.seq) {
			h = w
		}
	}
	return h
}

func (g *rateGate) leaveLocked(w *waiter) {
	for i, q := range g.queue {
		if q == w {
			g.queue = append(g.queue[:i], g.queue[i+1:]...)
			break
		}
	}
	g.changedLocked()
}

func (g *rateGate) turnLocked() chan struct{} {
	if g.turn == nil {
		g.turn = make(chan struct{})
	}
	return g.turn
}

func (g *rateGate) changedLocked() {
	if g.turn != nil {
		close(g.turn)
		g.turn = nil
	}
}

func (g *rateGate) jitterOf() time.Duration {
	if g.jitter == nil {
		return 0
	}
	return g.jitter()
}

// failed counts a call that passed the gate and got no answer (not sent, or no answer came).
func (g *rateGate) failed() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inflight = max(g.inflight-1, 0)
}

// observe reads an answer's rate-limit headers. It returns the wait it closed the gate for (0:
// none) and whether the answer was a 429.
func (g *rateGate) observe(resp *http.Response, now time.Time) (wait time.Duration, limited bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inflight = max(g.inflight-1, 0)
	spent := g.noteLocked(resp.Header, now)
	limited = resp.StatusCode == http.StatusTooManyRequests
	switch {
	case limited:
		wait = retryAfter(resp.Header, now) + headerSlack
		if g.limit > 0 {
			g.remaining = 0
		}
	case spent:
		wait = g.windowEnd.Sub(now)
	default:
		return 0, false
	}
	wait = min(max(wait, 0), maxRateWait) + g.jitterOf()
	if until := now.Add(wait); until.After(g.until) {
		g.until = until
		g.windowEnd = maxTime(g.windowEnd, until)
		g.changedLocked()
	}
	return wait, limited
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// retryAfter is a 429's Retry-After (seconds or an HTTP date), else its X-RateLimit-Reset.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if v := h.Get("Retry-After"); v != "" {
		return retryAfterOf(v, now)
	}
	return headerSeconds(h.Get("X-RateLimit-Reset"))
}

// retryAfterOf reads a Retry-After header (seconds, or an HTTP date relative to now), bounded
// by maxRetryAfter; 0 when absent or unreadable.
func retryAfterOf(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		d = time.Duration(min(secs, int64(maxRetryAfter/time.Second))) * time.Second
	} else if at, err := http.ParseTime(v); err == nil {
		d = at.Sub(now)
	}
	return min(max(d, 0), maxRetryAfter)
}

// headerSeconds parses a non-negative number of seconds; anything else is 0.
func headerSeconds(v string) time.Duration {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0
	}
	return time.Duration(min(n, int(maxRateWait/time.Second))) * time.Second
}
