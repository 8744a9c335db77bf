package molecule

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/bridge/chat"
	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/ledger"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// The wait's transitions: retrying → waiting(reason, until) with the backoff as the least wait
// and the reason's own time as the floor; the chat told once per reason; a new reason starts
// the backoff over; a bound or a give-up → failed; a result that stands → done.
func TestWaitTransitions(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		now := time.Now()
		w := newWait(time.Second, 30*time.Second, nil)
		if w.state != stateRetrying {
			t.Fatalf("a new wait is %v, want retrying", w.state)
		}
		if !w.settle(condition{reason: reasonModelUnreachable}, now) || w.state != stateWaiting || w.reason != reasonModelUnreachable {
			t.Fatalf("first unreachable: state %v reason %q, want waiting and told", w.state, w.reason)
		}
		if d := w.until.Sub(now); d < time.Second/2 || d > 3*time.Second/2 {
			t.Errorf("first wait %v, want the backoff's first interval (1 s ±50%%)", d)
		}
		if w.settle(condition{reason: reasonModelUnreachable}, now) {
			t.Error("the same reason told twice")
		}
		// The reason's own time wins over a shorter backoff.
		reset := now.Add(time.Hour)
		if !w.settle(condition{reason: reasonUsageLimit, until: reset}, now) || !w.until.Equal(reset) || w.since != now {
			t.Errorf("usage limit: until %v since %v, want the reset %v and a new wait", w.until, w.since, reset)
		}
		// A new reason starts the backoff over.
		w.settle(condition{reason: reasonPlatformDown}, now)
		if d := w.until.Sub(now); d > 3*time.Second/2 {
			t.Errorf("wait %v after a new reason, want the backoff started over", d)
		}
		if !slices.Equal(w.told, []ledger.WaitReason{reasonModelUnreachable, reasonUsageLimit, reasonPlatformDown}) {
			t.Errorf("told %v", w.told)
		}
		// A bound counted from the reason's first try.
		b := newWait(time.Second, 30*time.Second, nil)
		b.settle(condition{reason: reasonBusy, within: 10 * time.Second}, now)
		if b.settle(condition{reason: reasonBusy, within: 10 * time.Second}, now.Add(10*time.Second)); b.state != stateFailed {
			t.Errorf("busy past its bound: %v, want failed", b.state)
		}
		g := newWait(time.Second, 30*time.Second, nil)
		if g.settle(condition{reason: reasonUsageLimit, giveUp: true}, now) || g.state != stateFailed {
			t.Errorf("give-up: %v, want failed and nobody told", g.state)
		}
		d := newWait(time.Second, 30*time.Second, []ledger.WaitReason{reasonUsageLimit})
		if d.settle(condition{reason: reasonUsageLimit}, now) {
			t.Error("a reason restored as told was told again")
		}
		if d.settle(condition{}, now); d.state != stateDone {
			t.Errorf("a result that stands: %v, want done", d.state)
		}
	})
}

// run: each try comes no sooner than the reason's floor and only once its hold lets go; ctx
// ends a wait (failed, ctx's error).
func TestWaitRunHonoursFloorAndHold(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var tries []time.Duration
		resumed := make(chan struct{})
		hold := func(ctx context.Context) error {
			select {
			case <-resumed:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		var states []string
		w := newWait(time.Second, 30*time.Second, nil)
		done := make(chan error, 1)
		go func() {
			done <- w.run(context.Background(), func() condition {
				tries = append(tries, time.Since(start))
				switch len(tries) {
				case 1:
					return condition{reason: reasonRetryAfter, until: time.Now().Add(40 * time.Second)}
				case 2:
					return condition{reason: reasonPaused, hold: hold}
				}
				return condition{}
			}, func(c condition, newReason, tell bool) {
				states = append(states, fmt.Sprintf("%d(%s)", w.state, w.reason))
			})
		}()
		synctest.Wait()
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		if len(tries) != 2 {
			t.Fatalf("%d tries before the resume, want 2 (none while paused)", len(tries))
		}
		close(resumed)
		if err := <-done; err != nil || w.state != stateDone {
			t.Fatalf("run = %v in %v", err, w.state)
		}
		if tries[1] < 40*time.Second {
			t.Errorf("second try %v after the first, before the Retry-After of 40 s", tries[1])
		}
		if !slices.Equal(states, []string{"1(retry-after)", "1(paused)"}) {
			t.Errorf("states %q", states)
		}

		ctx, cancel := context.WithCancel(context.Background())
		w = newWait(time.Second, 30*time.Second, nil)
		go func() {
			done <- w.run(ctx, func() condition { return condition{reason: reasonModelUnreachable} }, func(condition, bool, bool) {})
		}()
		time.Sleep(time.Minute)
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) || w.state != stateFailed {
			t.Fatalf("run after cancel = %v in %v, want canceled and failed", err, w.state)
		}
	})
}

// waitAnswerer answers with err while down is set, else echoes.
type waitAnswerer struct {
	down  atomic.Pointer[error]
	calls atomic.Int32
}

func (a *waitAnswerer) SubmitInput(_ context.Context, key string, in supervisor.Input) (supervisor.Reply, error) {
	a.calls.Add(1)
	if e := a.down.Load(); e != nil {
		return supervisor.Reply{ChatKey: key}, *e
	}
	return chattest.EchoReply(key, in.Text), nil
}

func (a *waitAnswerer) set(err error) {
	if err == nil {
		a.down.Store(nil)
		return
	}
	a.down.Store(&err)
}

// bubbleInbox runs an inbox on p's in-process transport inside a synctest bubble, with the
// default retry timings and the state in dir; change adjusts its config.
func bubbleInbox(t *testing.T, p *moleculetest.Platform, dir string, a chat.Answerer, change func(*Config)) (m *Inbox, stop func()) {
	t.Helper()
	cfg := testConfig(p, dir, a, zap.NewNop())
	cfg.HTTPClient = &http.Client{Transport: p.Transport()}
	cfg.PollInterval = time.Second
	cfg.RetryInitial, cfg.RetryMax, cfg.BusyRetryFor = 0, 0, 0
	if change != nil {
		change(&cfg)
	}
	m, err := New(cfg)
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return m, stop
}

func unreachable(key string) error {
	return &supervisor.WatchdogError{ChatKey: key, Watchdog: supervisor.WatchdogModelUnreachable, Cause: "Connection failed"}
}

// A message that meets an unreachable model waits: its chat is told once, however many tries;
// the inbox stops and starts again on the same state (a restart, or a reload's new image)
// meanwhile: the chat is not told again, and once the model is back the message is answered
// once.
func TestWaitUnreachableCrossesRestartToldOnce(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		a := &waitAnswerer{}
		a.set(unreachable("k"))
		m, stop := bubbleInbox(t, p, dir, a, nil)
		id := p.Enqueue(moleculetest.CanvasMessage("hi"))[0]
		time.Sleep(time.Minute)
		if n := m.Stats().UnreachableRetries; n < 3 {
			t.Fatalf("%d tries put off in a minute, want several", n)
		}
		notes := p.Notifies()
		if len(notes) != 1 || !strings.Contains(notes[0].Message, "answered when the service is back") {
			t.Fatalf("notifies while unreachable = %+v, want one notice", notes)
		}
		stop()
		if st := readState(t, dir); len(st.Waits) != 1 || st.Waits[0].ActivityID != id || !slices.Contains(st.Waits[0].Told, reasonModelUnreachable) {
			t.Fatalf("state after stop: waits %+v, want the message told of the outage", st.Waits)
		}

		m2, stop2 := bubbleInbox(t, p, dir, a, nil)
		time.Sleep(time.Minute)
		if m2.Stats().UnreachableRetries < 2 || len(p.Notifies()) != 1 {
			t.Fatalf("after the restart: %+v, %d notifies, want the message waiting and not told again", m2.Stats(), len(p.Notifies()))
		}
		a.set(nil)
		time.Sleep(time.Minute)
		notes = p.Notifies()
		if len(notes) != 2 || notes[1].Message != "echo: hi" {
			t.Fatalf("notifies = %+v, want the notice, then the answer once", notes)
		}
		stop2()
		if st := readState(t, dir); st.Cursor != id || len(st.Waits) != 0 {
			t.Fatalf("state after the answer: cursor %q waits %+v", st.Cursor, st.Waits)
		}
	})
}

// fakeParker holds parked messages until released, and records who waited.
type fakeParker struct {
	released chan struct{}
	mu       sync.Mutex
	waits    []string
}

func (f *fakeParker) AwaitUsable(ctx context.Context, chatKey string, _ time.Time) error {
	f.mu.Lock()
	f.waits = append(f.waits, chatKey)
	f.mu.Unlock()
	select {
	case <-f.released:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A message that meets the usage limit waits for the reset (the Parker) and no sooner than the
// reset time, with the chat told once; then it is answered once. A reset past ParkLimit is
// answered with the limit at once.
func TestWaitUsageLimit(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	synctest.Test(t, func(t *testing.T) {
		a := &waitAnswerer{}
		reset := time.Now().Add(time.Hour)
		a.set(&supervisor.UsageLimitError{ChatKey: "k", ResetsAt: reset})
		park := &fakeParker{released: make(chan struct{})}
		m, stop := bubbleInbox(t, p, t.TempDir(), a, func(c *Config) { c.Limits = park; c.ParkLimit = 2 * time.Hour })
		p.Enqueue(moleculetest.CanvasMessage("hi"))
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		if n := a.calls.Load(); n != 1 {
			t.Fatalf("%d tries before the reset, want 1", n)
		}
		notes := p.Notifies()
		if len(notes) != 1 || !strings.Contains(notes[0].Message, "usage limit reached; your message will be answered after") {
			t.Fatalf("notifies = %+v, want one usage-limit notice", notes)
		}
		a.set(nil)
		close(park.released) // the supervisor lets it go; the reset time still holds it
		time.Sleep(30 * time.Minute)
		if len(p.Notifies()) != 1 {
			t.Fatalf("answered before the reset: %+v", p.Notifies())
		}
		time.Sleep(time.Hour)
		if notes := p.Notifies(); len(notes) != 2 || notes[1].Message != "echo: hi" {
			t.Fatalf("notifies = %+v, want the notice and the answer once", notes)
		}
		if s := m.Stats(); s.Parked != 1 {
			t.Errorf("parked = %d, want 1", s.Parked)
		}
		stop()
	})

	p2 := moleculetest.NewPlatform(t, moleculetest.Config{})
	synctest.Test(t, func(t *testing.T) {
		a := &waitAnswerer{}
		a.set(&supervisor.UsageLimitError{ChatKey: "k", ResetsAt: time.Now().Add(48 * time.Hour)})
		park := &fakeParker{released: make(chan struct{})}
		m, stop := bubbleInbox(t, p2, t.TempDir(), a, func(c *Config) { c.Limits = park; c.ParkLimit = time.Hour })
		p2.Enqueue(moleculetest.CanvasMessage("hi"))
		time.Sleep(time.Minute)
		notes := p2.Notifies()
		if len(notes) != 1 || !strings.Contains(notes[0].Message, "please send your message again") || len(park.waits) != 0 {
			t.Fatalf("notifies = %+v (parked %v), want the limit's answer and nothing parked", notes, park.waits)
		}
		if s := m.Stats(); s.ParkedTooLong != 1 || s.Parked != 0 {
			t.Errorf("stats %+v", s)
		}
		stop()
	})
}

// A paused workspace holds a waiting message: no try while paused, the chat is not told (its
// owner paused it), and it is answered once resumed.
func TestWaitPausedHoldsTries(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	synctest.Test(t, func(t *testing.T) {
		a := &waitAnswerer{}
		a.set(unreachable("k"))
		_, stop := bubbleInbox(t, p, t.TempDir(), a, func(c *Config) { c.HeartbeatInterval = 20 * time.Second })
		p.Enqueue(moleculetest.CanvasMessage("hi"))
		time.Sleep(5 * time.Second)
		p.Pause()
		time.Sleep(time.Minute) // a heartbeat's state check sees the pause
		synctest.Wait()
		before := a.calls.Load()
		a.set(nil)
		time.Sleep(5 * time.Minute)
		if n := a.calls.Load(); n != before {
			t.Fatalf("%d tries while paused, want none", n-before)
		}
		if n := len(p.Notifies()); n != 1 {
			t.Fatalf("%d notifies while paused, want the outage's notice only", n)
		}
		p.Resume()
		time.Sleep(time.Minute)
		if notes := p.Notifies(); len(notes) != 2 || notes[1].Message != "echo: hi" {
			t.Fatalf("notifies after the resume = %+v", notes)
		}
		stop()
	})
}

// A reply the platform answers 503 with Retry-After (or 429) is sent again no sooner than the
// Retry-After, by the same wait; the chat is not told (the platform is what is away).
func TestWaitDeliveryRetryAfter(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusTooManyRequests} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			p := moleculetest.NewPlatform(t, moleculetest.Config{})
			synctest.Test(t, func(t *testing.T) {
				a := &waitAnswerer{}
				m, stop := bubbleInbox(t, p, t.TempDir(), a, nil)
				p.FailNextWith(moleculetest.RouteNotify, 1, status, http.Header{"Retry-After": {"90"}})
				p.Enqueue(moleculetest.CanvasMessage("hi"))
				time.Sleep(80 * time.Second)
				if n := len(p.Notifies()); n != 0 {
					t.Fatalf("sent again before Retry-After: %d notifies", n)
				}
				time.Sleep(time.Minute)
				if notes := p.Notifies(); len(notes) != 1 || notes[0].Message != "echo: hi" {
					t.Fatalf("notifies = %+v, want the answer once", notes)
				}
				if s := m.Stats(); s.DeliveryRetries != 1 || a.calls.Load() != 1 {
					t.Errorf("stats %+v, %d turns: want one retry, one turn", s, a.calls.Load())
				}
				stop()
			})
		})
	}
}

// The line of a chat's handed-over messages that wait: a later one tries again only after the
// earlier ones, the chat's next message is handed over only when none waits, and other chats
// are not held.
func TestHandedLineKeepsChatOrder(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var l handedLine
		one, two := l.next(), l.next()
		l.set("a", two, true)
		l.set("a", one, true)
		var order []string
		var mu sync.Mutex
		note := func(s string) {
			mu.Lock()
			order = append(order, s)
			mu.Unlock()
		}
		ctx := context.Background()
		go func() { must(t, l.await(ctx, "a", two)); note("two") }()
		go func() { must(t, l.await(ctx, "a", 0)); note("next") }()
		go func() { must(t, l.await(ctx, "b", 0)); note("other chat") }()
		must(t, l.await(ctx, "a", one))
		synctest.Wait()
		if !slices.Equal(order, []string{"other chat"}) {
			t.Fatalf("before the first goes on: %q, want only the other chat", order)
		}
		l.set("a", one, false)
		synctest.Wait()
		if !slices.Equal(order, []string{"other chat", "two"}) {
			t.Fatalf("after the first: %q, want the second, not the next message", order)
		}
		l.set("a", two, false)
		synctest.Wait()
		if !slices.Equal(order, []string{"other chat", "two", "next"}) {
			t.Fatalf("after both: %q", order)
		}
		cctx, cancel := context.WithCancel(ctx)
		l.set("a", one, true)
		cancel()
		if err := l.await(cctx, "a", 0); !errors.Is(err, context.Canceled) {
			t.Fatalf("await after cancel = %v", err)
		}
	})
}
