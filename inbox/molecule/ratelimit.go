package molecule

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
type rateGate struct {
	mu    sync.Mutex
	until time.Time
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
