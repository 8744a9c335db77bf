package appserver_test

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/appserver/appservertest"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// retryLog records OnOverloadRetry calls. then, when set, runs after each recorded call (a test
// cancels its context from it: the client is then waiting out the backoff).
type retryLog struct {
	mu     sync.Mutex
	counts map[string]int
	then   func(method string)
}

func (r *retryLog) record(method string) {
	r.mu.Lock()
	if r.counts == nil {
		r.counts = map[string]int{}
	}
	r.counts[method]++
	then := r.then
	r.mu.Unlock()
	if then != nil {
		then(method)
	}
}

func (r *retryLog) snapshot() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.counts)
}

func (r *retryLog) onRetry(fn func(method string)) {
	r.mu.Lock()
	r.then = fn
	r.mu.Unlock()
}

// overloadMode is mode with each of methods refused n times.
func overloadMode(mode string, n int, methods ...string) string {
	for _, m := range methods {
		mode += "," + appservertest.FakeOverload + "=" + m + ":" + strconv.Itoa(n)
	}
	return mode
}

// fastRetry retries up to n times with waits of a millisecond; the elapsed bound is a hang guard.
func fastRetry(log *retryLog, n int) func(*appserver.Config) {
	return func(cfg *appserver.Config) {
		cfg.Overload = appserver.OverloadRetry{Initial: time.Millisecond, MaxInterval: time.Millisecond,
			MaxElapsed: promptly, MaxRetries: n}
		cfg.OnOverloadRetry = log.record
	}
}

// Every request the client sends is retried when codex refuses it as overloaded, and a refused
// turn/start started no turn: the turn that is finally accepted is the thread's first.
func TestFakeOverloadedRequestsAreRetried(t *testing.T) {
	noLeaks(t)
	var log retryLog
	mode := overloadMode(appservertest.FakeOK, 1, protocol.MethodInitialize) +
		overloadMode("", 2, protocol.MethodThreadStart, protocol.MethodThreadResume, protocol.MethodThreadTurns,
			protocol.MethodTurnStart)
	c := startFake(t, mode, fastRetry(&log, 2))
	ctx := ctxTimeout(t, time.Minute)
	thread, err := c.StartThread(ctx, appserver.ThreadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ResumeThread(ctx, thread, appserver.ThreadOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.LastTurn(ctx, thread); err != nil {
		t.Fatal(err)
	}
	res, err := c.RunTurn(ctx, thread, text("hi"), appserver.TurnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != protocol.TurnCompleted || replyOf(res) != "reply #1: hi" {
		t.Errorf("status %q reply %q, want the thread's first turn completed", res.Status, replyOf(res))
	}
	want := map[string]int{protocol.MethodInitialize: 1, protocol.MethodThreadStart: 2, protocol.MethodThreadResume: 2,
		protocol.MethodThreadTurns: 2, protocol.MethodTurnStart: 2}
	if got := log.snapshot(); !maps.Equal(got, want) {
		t.Errorf("retries %v, want %v", got, want)
	}
}

// Past the bound the refusal is returned, wrapping ErrOverloaded and naming the method and the
// pid; the client stays usable.
func TestFakeOverloadPastTheBoundIsAnError(t *testing.T) {
	noLeaks(t)
	var log retryLog
	// Three refusals of each: one attempt and two retries, all refused.
	c := startFake(t, overloadMode(appservertest.FakeOK, 3, protocol.MethodThreadStart, protocol.MethodTurnStart),
		fastRetry(&log, 2))
	ctx := ctxTimeout(t, time.Minute)
	pid := strconv.Itoa(c.PID())

	_, err := c.StartThread(ctx, appserver.ThreadOptions{})
	if !errors.Is(err, appserver.ErrOverloaded) || !strings.Contains(err.Error(), protocol.MethodThreadStart) ||
		!strings.Contains(err.Error(), "pid "+pid) {
		t.Fatalf("error %v, want ErrOverloaded naming %s and pid %s", err, protocol.MethodThreadStart, pid)
	}
	thread, err := c.StartThread(ctx, appserver.ThreadOptions{})
	if err != nil {
		t.Fatalf("thread/start after the refusals: %v", err)
	}

	res, err := c.RunTurn(ctx, thread, text("refused"), appserver.TurnOptions{})
	if !errors.Is(err, appserver.ErrOverloaded) || !strings.Contains(err.Error(), protocol.MethodTurnStart) ||
		!strings.Contains(err.Error(), "pid "+pid) || res != nil {
		t.Fatalf("result %+v error %v, want ErrOverloaded naming %s and pid %s", res, err, protocol.MethodTurnStart, pid)
	}
	res, err = c.RunTurn(ctx, thread, text("accepted"), appserver.TurnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if replyOf(res) != "reply #1: accepted" {
		t.Errorf("reply %q: a refused turn/start must not have started a turn", replyOf(res))
	}
	if got, want := log.snapshot(), map[string]int{protocol.MethodThreadStart: 2, protocol.MethodTurnStart: 2}; !maps.Equal(got, want) {
		t.Errorf("retries %v, want %v", got, want)
	}
}

// A context cancelled while the client waits to retry ends the call at once with the context's
// cause; for turn/start no turn was started, so there is nothing to interrupt or wait for.
func TestFakeCancelDuringOverloadBackoff(t *testing.T) {
	noLeaks(t)
	var log retryLog
	c := startFake(t, overloadMode(appservertest.FakeOK, 1, protocol.MethodThreadStart, protocol.MethodTurnStart),
		func(cfg *appserver.Config) {
			// Waits far longer than the test may take: only the cancellation can end them.
			cfg.Overload = appserver.OverloadRetry{Initial: time.Hour, MaxInterval: time.Hour, MaxElapsed: 10 * time.Hour}
			cfg.OnOverloadRetry = log.record
		})
	errStop := errors.New("caller gave up")
	ctx := ctxTimeout(t, time.Minute)

	tctx, cancel := context.WithCancelCause(ctx)
	log.onRetry(func(string) { cancel(errStop) })
	start := time.Now()
	if _, err := c.StartThread(tctx, appserver.ThreadOptions{}); !errors.Is(err, errStop) {
		t.Fatalf("thread/start error %v, want the cancel cause", err)
	}
	within(t, start, promptly, "thread/start cancelled in its backoff")

	log.onRetry(nil)
	thread, err := c.StartThread(ctx, appserver.ThreadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tctx, cancel = context.WithCancelCause(ctx)
	log.onRetry(func(string) { cancel(errStop) })
	start = time.Now()
	res, err := c.RunTurn(tctx, thread, text("cancelled"), appserver.TurnOptions{InterruptGrace: time.Hour})
	if !errors.Is(err, errStop) || errors.Is(err, appserver.ErrWedged) || res != nil {
		t.Fatalf("result %+v error %v, want the cancel cause and no turn", res, err)
	}
	within(t, start, promptly, "turn/start cancelled in its backoff")

	log.onRetry(nil)
	res, err = c.RunTurn(ctx, thread, text("next"), appserver.TurnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if replyOf(res) != "reply #1: next" {
		t.Errorf("reply %q: the cancelled turn/start must not have started a turn", replyOf(res))
	}
}

// turn/interrupt goes through the same retries: a refused interrupt is sent again, so the turn
// ends interrupted instead of being given up as wedged.
func TestFakeOverloadedInterruptIsRetried(t *testing.T) {
	noLeaks(t)
	var log retryLog
	c, ctx, thread := startFakeThread(t, overloadMode(appservertest.FakeNoComplete, 2, protocol.MethodTurnInterrupt),
		fastRetry(&log, 2))
	errShutdown := errors.New("shutting down")
	tctx, cancel := context.WithCancelCause(ctx)
	res, err := c.RunTurn(tctx, thread, text("hi"), appserver.TurnOptions{
		InterruptGrace: promptly,
		OnNotification: func(n protocol.Notification) {
			if n.Method == protocol.NotifyTurnStarted {
				cancel(errShutdown)
			}
		},
	})
	if !errors.Is(err, errShutdown) || errors.Is(err, appserver.ErrWedged) {
		t.Fatalf("error %v, want the cancel cause and not wedged", err)
	}
	if res == nil || res.Status != protocol.TurnInterrupted {
		t.Errorf("result %+v, want interrupted", res)
	}
	if got, want := log.snapshot(), map[string]int{protocol.MethodTurnInterrupt: 2}; !maps.Equal(got, want) {
		t.Errorf("retries %v, want %v", got, want)
	}
}
