package appserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// errRefused stands for a request codex refused as overloaded, as responseErr reports it.
var errRefused = fmt.Errorf("thread/start on codex pid 7: %w: code -32001", ErrOverloaded)

// TestOverloadRetryWaits: with the defaults, the waits between attempts grow from 100 ms,
// doubling up to 2 s, each within ±50 % jitter; retrying stops after 8 retries or 10 s, and the
// last refusal comes back with the count. Time is synctest's: the waits are exact.
func TestOverloadRetryWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := OverloadRetry{}.withDefaults()
		start := time.Now()
		var at []time.Time
		retries := 0
		err := p.do(context.Background(), func(int, time.Duration) { retries++ }, func() error {
			at = append(at, time.Now())
			return errRefused
		})
		elapsed := time.Since(start)
		if !errors.Is(err, ErrOverloaded) || !strings.Contains(err.Error(), "thread/start on codex pid 7") {
			t.Fatalf("error %v, want the last refusal", err)
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("refused %d times", len(at))) {
			t.Errorf("error %q does not count the %d attempts", err, len(at))
		}
		if retries != len(at)-1 || retries < 1 || retries > DefaultOverloadMaxRetries {
			t.Fatalf("%d attempts, %d retries counted; want 1 to %d retries", len(at), retries, DefaultOverloadMaxRetries)
		}
		if elapsed > DefaultOverloadMaxElapsed {
			t.Errorf("retrying took %s, past the bound of %s", elapsed, DefaultOverloadMaxElapsed)
		}
		// With the least jitter (-50 %) the 8 waits take 0.05+0.1+0.2+0.4+0.8+1+1+1 = 4.55 s, far
		// inside 10 s, so the attempt bound is reached unless jitter stretched the waits past it.
		if len(at) < DefaultOverloadMaxRetries+1 && elapsed < DefaultOverloadMaxElapsed/2 {
			t.Errorf("gave up after %d attempts and %s: neither bound reached", len(at), elapsed)
		}
		base := DefaultOverloadInitial
		for i := 1; i < len(at); i++ {
			wait := at[i].Sub(at[i-1])
			if lo, hi := base/2, base*3/2; wait < lo || wait > hi {
				t.Errorf("wait %d = %s, want within [%s, %s]", i, wait, lo, hi)
			}
			base = min(2*base, DefaultOverloadMaxInterval)
		}
	})
}

// TestOverloadRetryOutcomes: a success after refusals, another error, retrying turned off, and the
// elapsed bound.
func TestOverloadRetryOutcomes(t *testing.T) {
	errOther := errors.New("invalid request")
	cases := []struct {
		name     string
		p        OverloadRetry
		results  []error // one per attempt; the last repeats
		want     error   // nil: success
		attempts int
	}{
		{"refused twice then accepted", OverloadRetry{}, []error{errRefused, errRefused, nil}, nil, 3},
		{"other errors are not retried", OverloadRetry{}, []error{errOther}, errOther, 1},
		{"refused then another error", OverloadRetry{}, []error{errRefused, errOther}, errOther, 2},
		{"retrying off", OverloadRetry{MaxRetries: -1}, []error{errRefused}, ErrOverloaded, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := tc.p.withDefaults()
				attempts, retries := 0, 0
				err := p.do(context.Background(), func(int, time.Duration) { retries++ }, func() error {
					r := tc.results[min(attempts, len(tc.results)-1)]
					attempts++
					return r
				})
				if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
					t.Fatalf("error %v, want %v", err, tc.want)
				}
				if attempts != tc.attempts || retries != attempts-1 {
					t.Errorf("%d attempts, %d retries; want %d attempts", attempts, retries, tc.attempts)
				}
			})
		})
	}
}

// TestOverloadRetryElapsedBound: no wait ends past MaxElapsed, whatever the retry count allows.
func TestOverloadRetryElapsedBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Waits of 0.5 to 1.5 s against a 2.5 s bound: at least one wait fits, at most five.
		p := OverloadRetry{Initial: time.Second, MaxInterval: time.Second, MaxElapsed: 2500 * time.Millisecond,
			MaxRetries: 100}.withDefaults()
		start := time.Now()
		attempts := 0
		err := p.do(context.Background(), func(int, time.Duration) {}, func() error {
			attempts++
			return errRefused
		})
		if el := time.Since(start); !errors.Is(err, ErrOverloaded) || el > p.MaxElapsed || attempts < 2 || attempts > 6 {
			t.Errorf("error %v after %d attempts and %s, want the refusal within %s", err, attempts, el, p.MaxElapsed)
		}
	})
}

// TestOverloadRetryStopsWithContext: a context cancelled during a wait ends it at that instant
// with the context's cause, however long the wait was to be.
func TestOverloadRetryStopsWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		errStop := errors.New("turn deadline")
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		p := OverloadRetry{Initial: time.Hour, MaxInterval: time.Hour, MaxElapsed: 10 * time.Hour}.withDefaults()
		start := time.Now()
		attempts := 0
		err := p.do(ctx, func(int, time.Duration) {
			time.AfterFunc(50*time.Millisecond, func() { cancel(errStop) })
		}, func() error {
			attempts++
			return errRefused
		})
		if !errors.Is(err, errStop) || errors.Is(err, ErrOverloaded) {
			t.Fatalf("error %v, want the cause alone", err)
		}
		if el := time.Since(start); el != 50*time.Millisecond || attempts != 1 {
			t.Errorf("returned after %s and %d attempts, want 50ms and 1", el, attempts)
		}
	})
}
