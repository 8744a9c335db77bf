package molecule

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/platform"
)

// The heartbeat loop ticks every interval (first one interval after the start) until canceled.
func TestRunEveryInterval(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		var at []time.Duration
		done := make(chan struct{})
		go func() {
			defer close(done)
			platform.RunEvery(ctx, DefaultHeartbeatInterval, func(context.Context) { at = append(at, time.Since(start)) })
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
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var waits []time.Duration
		attempts := 0
		err := platform.RetryForever(context.Background(), time.Second, 8*time.Second, func() error {
			attempts++
			if attempts < 8 {
				return &platform.HTTPError{Op: "notify", Status: 502}
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
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		attempts := 0
		perm := &platform.HTTPError{Op: "notify", Status: http.StatusForbidden}
		err := platform.RetryForever(context.Background(), time.Second, time.Minute, func() error {
			attempts++
			if platform.Permanent(perm) {
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
		err = platform.RetryForever(ctx, time.Second, time.Minute, func() error { attempts++; return errors.New("down") }, nil)
		if !errors.Is(err, context.DeadlineExceeded) || attempts < 10 {
			t.Fatalf("err = %v after %d attempts", err, attempts)
		}
	})
}

// The heartbeat body reports in-flight turns and the failure rate since the previous beat,
// then resets the window.
func TestHeartbeatBody(t *testing.T) {
	t.Parallel()
	cfg := Config{}
	win := &answerWindow{}
	sh := shared{deps: deps{cfg: &cfg}, window: win}
	a := newAnswerer(sh, nil, nil, nil)
	a.inflight = map[string]string{"a1": "peer:b", "a2": "canvas:ws"}
	w := newWorkspace(sh, nil, a.busy)
	w.runStart = time.Now().Add(-90 * time.Second)
	win.note(false, "")
	win.note(true, "codex failed (status failed): x")
	hb := w.heartbeatBody()
	if hb.ActiveTasks != 2 || hb.CurrentTask != "answering canvas:ws" || hb.ErrorRate != 0.5 ||
		hb.SampleError != "codex failed (status failed): x" || hb.UptimeSeconds < 90 {
		t.Fatalf("heartbeat = %+v", hb)
	}
	if hb := w.heartbeatBody(); hb.ErrorRate != 0 || hb.SampleError != "" {
		t.Fatalf("window not reset: %+v", hb)
	}
}

// A platform that answers 410 to every cursor makes the inbox fall back to the recent window
// again and again. The fallbacks back off exponentially (instead of two full-window fetches a
// second) and the backoff starts over once a cursor is accepted again.
func TestCursorGoneBacksOff(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	synctest.Test(t, func(t *testing.T) {
		log, _ := newTestLogger(t)
		cfg := testConfig(p, t.TempDir(), chattest.NewAnswerer(nil), log)
		cfg.HTTPClient = &http.Client{Transport: p.Transport()}
		cfg.PollInterval = time.Second
		cfg.RetryInitial = time.Second
		cfg.RetryMax = 30 * time.Second
		m, err := New(cfg)
		must(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}()
		p.Enqueue(moleculetest.CanvasMessage("a"))
		time.Sleep(5 * time.Second)
		if s := m.Stats(); s.Delivered != 1 || s.Cursor == "" {
			t.Fatalf("stats = %+v, want the message answered", s)
		}

		p.GoneFor(1 << 30)
		time.Sleep(10 * time.Minute)
		// Without backoff: a 410 and a fallback every poll interval, 600 of each. With it: the
		// waits grow from 1 s to the 30 s cap (±50% jitter), about 30 in ten minutes.
		if n := p.CountCalls(moleculetest.RouteActivity, http.StatusGone); n > 60 || n < 10 {
			t.Fatalf("%d polls answered 410 in 10 minutes, want between 10 and 60", n)
		}

		// The first row has left the 600 s window by now; a new one gives the fallback a cursor.
		p.ClearFailures()
		p.Enqueue(moleculetest.CanvasMessage("b"))
		time.Sleep(time.Minute) // the last wait ends, a fallback sets a cursor, a since_id poll succeeds
		if s := m.Stats(); s.Delivered != 2 {
			t.Fatalf("stats = %+v, want the second message answered", s)
		}
		p.GoneNext()
		time.Sleep(10 * time.Second)
		calls := p.CallsTo(moleculetest.RouteActivity)
		last := -1
		for i, c := range calls {
			if c.Status == http.StatusGone {
				last = i
			}
		}
		if last < 0 || last+1 >= len(calls) {
			t.Fatalf("no poll after the last 410 (%d polls)", len(calls))
		}
		if wait := calls[last+1].At.Sub(calls[last].At); wait > cfg.RetryInitial*3/2 {
			t.Errorf("fallback %v after a 410 that followed a good poll, want the backoff reset to about %v", wait, cfg.RetryInitial)
		}
	})
}
