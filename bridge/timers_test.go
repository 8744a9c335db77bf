package bridge

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// The heartbeat loop ticks every interval (first one interval after the start) until canceled.
func TestRunEveryInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		var at []time.Duration
		done := make(chan struct{})
		go func() {
			defer close(done)
			runEvery(ctx, DefaultHeartbeatInterval, func(context.Context) { at = append(at, time.Since(start)) })
		}()
		time.Sleep(65 * time.Second) // fake time inside the bubble
		cancel()
		<-done
		want := []time.Duration{20 * time.Second, 40 * time.Second, 60 * time.Second}
		if len(at) != len(want) {
			t.Fatalf("ticks at %v, want %v", at, want)
		}
		for i := range want {
			if at[i] != want[i] {
				t.Fatalf("ticks at %v, want %v", at, want)
			}
		}
	})
}

// Delivery retries back off exponentially up to the cap and go on until success.
func TestRetryForeverBacksOffUntilSuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var waits []time.Duration
		attempts := 0
		err := retryForever(context.Background(), time.Second, 8*time.Second, func() error {
			attempts++
			if attempts < 8 {
				return &HTTPError{Op: "notify", Status: 502}
			}
			return nil
		}, func(_ error, d time.Duration) { waits = append(waits, d) })
		if err != nil || attempts != 8 {
			t.Fatalf("err = %v after %d attempts", err, attempts)
		}
		var total time.Duration
		for i, w := range waits {
			total += w
			if w > 8*time.Second*3/2 {
				t.Errorf("wait %d = %v exceeds the cap (with jitter)", i, w)
			}
		}
		if waits[len(waits)-1] < 4*time.Second {
			t.Errorf("waits %v did not grow toward the cap", waits)
		}
		if elapsed := time.Since(start); elapsed != total {
			t.Errorf("elapsed %v, waited %v", elapsed, total)
		}
	})
}

// A permanent error stops retrying at once; a canceled context stops a retry in its wait.
func TestRetryForeverStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		attempts := 0
		perm := &HTTPError{Op: "notify", Status: http.StatusForbidden}
		err := retryForever(context.Background(), time.Second, time.Minute, func() error {
			attempts++
			if permanentDeliveryError(perm) {
				return backoff.Permanent(perm)
			}
			return perm
		}, nil)
		if !errors.Is(err, perm) || attempts != 1 {
			t.Fatalf("err = %v after %d attempts, want the 403 after 1", err, attempts)
		}

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		attempts = 0
		err = retryForever(ctx, time.Second, time.Minute, func() error { attempts++; return errors.New("down") }, nil)
		if !errors.Is(err, context.DeadlineExceeded) || attempts < 10 {
			t.Fatalf("err = %v after %d attempts", err, attempts)
		}
	})
}

func TestPermanentDeliveryError(t *testing.T) {
	for status, want := range map[int]bool{400: true, 401: false, 403: true, 404: true, 408: false, 413: true, 429: false, 500: false, 502: false, 503: false} {
		if got := permanentDeliveryError(&HTTPError{Status: status}); got != want {
			t.Errorf("status %d permanent = %v, want %v", status, got, want)
		}
	}
	if permanentDeliveryError(errors.New("connection refused")) {
		t.Error("network error treated as permanent")
	}
}

// The heartbeat body reports in-flight turns and the failure rate since the previous beat,
// then resets the window.
func TestHeartbeatBody(t *testing.T) {
	m := &Molecule{inflight: map[string]string{"a1": "peer:b", "a2": "canvas:ws"}, runStart: time.Now().Add(-90 * time.Second)}
	m.noteAnswer(false, "")
	m.noteAnswer(true, "codex failed (status failed): x")
	hb := m.heartbeatBody()
	if hb.ActiveTasks != 2 || hb.CurrentTask != "answering canvas:ws" || hb.ErrorRate != 0.5 ||
		hb.SampleError != "codex failed (status failed): x" || hb.UptimeSeconds < 90 {
		t.Fatalf("heartbeat = %+v", hb)
	}
	if hb := m.heartbeatBody(); hb.ErrorRate != 0 || hb.SampleError != "" {
		t.Fatalf("window not reset: %+v", hb)
	}
}
