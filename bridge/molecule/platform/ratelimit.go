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
// minute by default, keyed by X-Molecule-Org-Id when sent, so the whole org shares one bucket).
// Every answer carries X-RateLimit-Limit, -Remaining and -Reset (seconds until the window
// refills); a 429 adds Retry-After (the same seconds, truncated).
const (
	// minRateWait is the least wait after a 429 or an empty bucket: the platform truncates the
	// seconds left, so "0" can mean most of a second.
	minRateWait = time.Second
	// maxRateWait caps a wait a platform (or a proxy before it) asks for: the real window is a
	// minute, and a hostile answer must not stop the daemon for a day.
	maxRateWait = 5 * time.Minute
)

// rateGate holds every platform call back while the platform's rate limit is spent: one gate
// for all calls of the client (poll, heartbeat, register, replies, ack, ...), since they share
// the platform's bucket. A 429 closes it for its Retry-After; an answer saying the bucket is
// empty (X-RateLimit-Remaining 0) closes it until the window refills, so the next call is not
// one more 429.
//
// It also keeps the bucket's budget as the last answer told it (X-RateLimit-Limit, -Remaining,
// -Reset), so that optional traffic (the stream's reconnects beyond the first, tool chips)
// spends at most a quarter of what remains in a window: replies, acks, heartbeats and polls come
// first.
type rateGate struct {
	mu    sync.Mutex
	until time.Time
	// The budget, from the last answer with the headers: limit -1 is "unlimited" (dev), 0 not
	// known yet.
	limit, remaining int
	resetAt          time.Time
	// optionalSpent and optionalDropped count optional requests in the current window and in
	// all.
	optionalSpent   int
	optionalDropped int64
	optionalTotal   int64
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
	return Budget{Limit: g.limit, Remaining: g.remaining, ResetAt: g.resetAt,
		OptionalSent: g.optionalTotal, OptionalDropped: g.optionalDropped}
}

// optional reports whether an optional request may go now, and counts it: while the budget is
// unknown or unlimited, yes; else while this window's optional requests are fewer than a
// quarter of what remains.
func (g *rateGate) optional(now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.resetAt.IsZero() && now.After(g.resetAt) {
		g.optionalSpent = 0 // a new window
		if g.limit > 0 {
			g.remaining = g.limit
		}
	}
	if g.limit > 0 && g.optionalSpent >= g.remaining/4 {
		g.optionalDropped++
		return false
	}
	g.optionalSpent++
	g.optionalTotal++
	return true
}

// windowLeft is how long until the current window refills (0 when unknown).
func (g *rateGate) windowLeft(now time.Time) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return max(g.resetAt.Sub(now), 0)
}

// note records the budget an answer's headers carry.
func (g *rateGate) note(h http.Header, now time.Time) {
	lim := strings.TrimSpace(h.Get("X-RateLimit-Limit"))
	if lim == "" {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if strings.EqualFold(lim, "unlimited") {
		g.limit = -1
		return
	}
	n, err := strconv.Atoi(lim)
	if err != nil || n <= 0 {
		return
	}
	resetAt := now.Add(headerSeconds(h.Get("X-RateLimit-Reset")))
	if g.resetAt.IsZero() || resetAt.After(g.resetAt.Add(time.Second)) {
		g.optionalSpent = 0 // the answer is from a new window
	}
	g.limit, g.resetAt = n, resetAt
	if r, err := strconv.Atoi(strings.TrimSpace(h.Get("X-RateLimit-Remaining"))); err == nil && r >= 0 {
		g.remaining = r
	}
}

// wait returns once the gate is open, or ctx's error.
func (g *rateGate) wait(ctx context.Context) error {
	for {
		g.mu.Lock()
		d := time.Until(g.until)
		g.mu.Unlock()
		if d <= 0 {
			return ctx.Err()
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// observe reads an answer's rate-limit headers. It returns the wait it closed the gate for (0:
// none) and whether the answer was a 429.
func (g *rateGate) observe(resp *http.Response, now time.Time) (wait time.Duration, limited bool) {
	g.note(resp.Header, now)
	limited = resp.StatusCode == http.StatusTooManyRequests
	switch {
	case limited:
		wait = retryAfter(resp.Header, now)
	case resp.Header.Get("X-RateLimit-Remaining") == "0":
		wait = headerSeconds(resp.Header.Get("X-RateLimit-Reset"))
	default:
		return 0, false
	}
	wait = min(max(wait, minRateWait), maxRateWait)
	g.mu.Lock()
	defer g.mu.Unlock()
	if until := now.Add(wait); until.After(g.until) {
		g.until = until
	}
	return wait, limited
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
