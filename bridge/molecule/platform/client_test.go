package platform

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/molecule-ai/codex-warm/internal/secretset"
)

// The rate gate: a 429 closes it for Retry-After read as under N+1 seconds (seconds or a date,
// at most maxRateWait), an answer that spent the bucket until its reset, read the same way;
// other answers leave it open.
func TestRateGateObserve(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	answer := func(status int, kv ...string) *http.Response {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return &http.Response{StatusCode: status, Header: h}
	}
	for _, tc := range []struct {
		name string
		resp *http.Response
		want time.Duration
	}{
		{"429 seconds", answer(429, "Retry-After", "17"), 18 * time.Second},
		{"429 zero is under a second", answer(429, "Retry-After", "0"), time.Second},
		{"429 date", answer(429, "Retry-After", now.Add(40*time.Second).Format(http.TimeFormat)), 41 * time.Second},
		{"429 reset only", answer(429, "X-RateLimit-Reset", "9"), 10 * time.Second},
		{"429 nothing", answer(429), time.Second},
		{"429 a day", answer(429, "Retry-After", "86400"), maxRateWait},
		{"bucket spent", answer(200, "X-RateLimit-Limit", "600", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "12"), 13 * time.Second},
		{"bucket not spent", answer(200, "X-RateLimit-Limit", "600", "X-RateLimit-Remaining", "3", "X-RateLimit-Reset", "12"), 0},
		{"503 with Retry-After is a peer's, not the bucket's", answer(503, "Retry-After", "8"), 0},
	} {
		var g rateGate
		got, _ := g.observe(tc.resp, now)
		if got != tc.want {
			t.Errorf("%s: wait %v, want %v", tc.name, got, tc.want)
		}
		if tc.want > 0 && !g.until.Equal(now.Add(tc.want)) {
			t.Errorf("%s: gate until %v, want %v", tc.name, g.until, now.Add(tc.want))
		}
	}
}

// Calls the gate held go out in class order once it reopens (replies, polls, heartbeats, then
// the rest), one releasePace apart, none before the window surely ended; a tenant keeps a tenth
// of the limit; calls at once do not overdraw what the last answer said remained.
func TestRateGateReleasesHeldCallsPacedInOrder(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		g := &rateGate{tenant: true}
		start := time.Now()
		g.note(http.Header{"X-Ratelimit-Limit": {"100"}, "X-Ratelimit-Remaining": {"12"}, "X-Ratelimit-Reset": {"3"}}, start)
		ctx := context.Background()
		// Two calls may go (12 remain, 10 are the tenant's reserve); the third is held.
		must(t, g.wait(ctx, ClassOther))
		must(t, g.wait(ctx, ClassOther))
		type went struct {
			class Class
			at    time.Duration
		}
		var mu sync.Mutex
		var order []went
		var wg sync.WaitGroup
		for _, c := range []Class{ClassOther, ClassHeartbeat, ClassPoll, ClassReply, ClassOther} {
			wg.Go(func() {
				must(t, g.wait(ctx, c))
				mu.Lock()
				order = append(order, went{c, time.Since(start)})
				mu.Unlock()
			})
			synctest.Wait() // queued in this order
		}
		wg.Wait()
		want := []Class{ClassReply, ClassPoll, ClassHeartbeat, ClassOther, ClassOther}
		for i, w := range order {
			if w.class != want[i] {
				t.Fatalf("release order %v, want classes %v", order, want)
			}
			if i == 0 && w.at < 4*time.Second {
				t.Fatalf("first held call went %v after a Reset of 3 s: before the window surely ended", w.at)
			}
			if i > 0 && w.at-order[i-1].at < releasePace {
				t.Fatalf("held calls went %v apart, want at least %v: %v", w.at-order[i-1].at, releasePace, order)
			}
		}
	})
}

// A 401 makes the inbox read the token file again even when its stat did not change (the same
// size and time), and the call is sent again at once with the file's token.
func TestUnauthorizedRereadsTokenFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, TokenFileName)
	must(t, os.WriteFile(path, []byte("token-aaaa"), 0o600))
	s := newTokenSource("token-aaaa", path, secretset.New())
	fi, err := os.Stat(path)
	must(t, err)
	must(t, os.WriteFile(path, []byte("token-bbbb"), 0o600))
	must(t, os.Chtimes(path, fi.ModTime(), fi.ModTime()))
	if got := s.current(); got != "token-aaaa" {
		t.Fatalf("current = %q before a 401: the stat did not change", got)
	}
	if !s.reload() || s.current() != "token-bbbb" {
		t.Fatalf("after a 401 the file's token is not used: %q", s.current())
	}
	if s.reload() {
		t.Fatal("reload reports a change when the file holds the token in use")
	}
}

// Optional traffic spends at most a quarter of what remains in the window, starts over in the
// next window, and is not held back while the budget is unknown or unlimited.
func TestRateGateOptionalBudget(t *testing.T) {
	now := time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC)
	g := &rateGate{}
	if !g.optional(now) {
		t.Fatal("an unknown budget held optional traffic back")
	}
	h := http.Header{"X-Ratelimit-Limit": {"600"}, "X-Ratelimit-Remaining": {"40"}, "X-Ratelimit-Reset": {"30"}}
	g.note(h, now)
	sent := 0
	for g.optional(now) {
		sent++
	}
	if sent != 10 {
		t.Fatalf("%d optional requests with 40 remaining, want 10 (a quarter)", sent)
	}
	if b := g.budget(); b.Limit != 600 || b.Remaining != 40 || b.OptionalDropped != 1 || !b.ResetAt.Equal(now.Add(31*time.Second)) {
		t.Fatalf("budget %+v", b)
	}
	if !g.optional(now.Add(32 * time.Second)) {
		t.Fatal("the next window did not allow optional traffic again")
	}
	g.note(http.Header{"X-Ratelimit-Limit": {"unlimited"}}, now)
	for range 1000 {
		if !g.optional(now) {
			t.Fatal("an unlimited (dev) platform held optional traffic back")
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestPermanentDeliveryError(t *testing.T) {
	t.Parallel()
	for status, want := range map[int]bool{400: true, 401: false, 403: true, 404: true, 408: false, 413: true, 429: false, 500: false, 502: false, 503: false} {
		if got := Permanent(&HTTPError{Status: status}); got != want {
			t.Errorf("status %d permanent = %v, want %v", status, got, want)
		}
	}
	if Permanent(errors.New("connection refused")) {
		t.Error("network error treated as permanent")
	}
}
