package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/protocol"

	"os"

	"path/filepath"

	"strings"

	"github.com/molecule-ai/codex-warm/internal/atomicfile"

	"github.com/molecule-ai/codex-warm/internal/atomicfile/atomicfiletest"
)

// newSup builds a supervisor on w inside a synctest bubble; mut adjusts the config. The pool is
// bounded by MaxChildren alone unless mut sets a memory budget: the default budget depends on the
// machine's free memory.
func newSup(t *testing.T, w *fakeWorld, mut func(*Config)) *Supervisor {
	t.Helper()
	cfg := Config{Spawn: w.spawn, MaxChildren: 8, MemoryBudget: -1}
	if mut != nil {
		mut(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// shutdown drains s; every test ends with it so the bubble has no goroutines left.
func shutdown(t *testing.T, s *Supervisor) {
	t.Helper()
	if err := s.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// pending is a Submit running in its own goroutine.
type pending struct {
	reply Reply
	err   error
	done  chan struct{}
}

func submitAsync(ctx context.Context, s *Supervisor, key, text string) *pending {
	p := &pending{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.reply, p.err = s.Submit(ctx, key, text)
	}()
	return p
}

// wait returns the outcome; the caller must know it is coming (synctest reports a deadlock
// otherwise).
func (p *pending) wait() (Reply, error) {
	<-p.done
	return p.reply, p.err
}

func (p *pending) finished() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func mustSubmit(t *testing.T, s *Supervisor, key, text string) Reply {
	t.Helper()
	r, err := s.Submit(context.Background(), key, text)
	if err != nil {
		t.Fatalf("Submit(%s, %q): %v", key, text, err)
	}
	return r
}

func row(t *testing.T, s *Supervisor, key string) ChildStatus {
	t.Helper()
	for _, c := range s.Status().Children {
		if c.ChatKey == key {
			return c
		}
	}
	t.Fatalf("no live child for chat %s in %+v", key, s.Status())
	return ChildStatus{}
}

func TestTransitionTable(t *testing.T) {
	t.Parallel()
	all := []State{StateStarting, StateSpare, StateIdle, StateBusy, StateRetiring, StateDead}
	valid := map[[2]State]bool{
		{StateStarting, StateIdle}:     true,
		{StateStarting, StateSpare}:    true,
		{StateSpare, StateStarting}:    true,
		{StateSpare, StateRetiring}:    true,
		{StateStarting, StateRetiring}: true,
		{StateStarting, StateDead}:     true,
		{StateIdle, StateBusy}:         true,
		{StateIdle, StateRetiring}:     true,
		{StateBusy, StateIdle}:         true,
		{StateBusy, StateRetiring}:     true,
		{StateRetiring, StateDead}:     true,
	}
	for _, from := range all {
		for _, to := range all {
			err := checkTransition(from, to)
			if want := valid[[2]State{from, to}]; (err == nil) != want {
				t.Errorf("%s → %s: err = %v, want valid = %v", from, to, err, want)
			}
		}
	}
}

// TestInvalidTransitionIsLoggedNotApplied drives the supervisor's own setter with a bad move.
func TestInvalidTransitionIsLoggedNotApplied(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.DebugLevel)
	s, err := New(Config{Spawn: newFakeWorld().spawn, MaxChildren: 1, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, s)
	sess := &session{key: &keyState{key: "k"}, state: StateDead}
	var ok bool
	s.st.do(func(tb *table) { ok = tb.setState(sess, StateBusy) })
	if ok || sess.state != StateDead {
		t.Fatalf("dead → busy applied: ok=%v state=%s", ok, sess.state)
	}
	if logs.FilterMessage("invalid child state transition").Len() != 1 {
		t.Fatalf("invalid transition not logged: %v", logs.All())
	}
}

func TestFIFOPerKey(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, nil)
		defer shutdown(t, s)
		ctx := context.Background()

		first := submitAsync(ctx, s, "a", "block:g")
		synctest.Wait()
		var rest []*pending
		for i := 2; i <= 6; i++ {
			rest = append(rest, submitAsync(ctx, s, "a", fmt.Sprintf("m%d", i)))
			synctest.Wait() // queued before the next one arrives
		}
		if got := row(t, s, "a").Queued; got != 5 {
			t.Fatalf("queued = %d, want 5", got)
		}
		w.open("g")
		if _, err := first.wait(); err != nil {
			t.Fatal(err)
		}
		for i, p := range rest {
			r, err := p.wait()
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("reply #%d: m%d", i+2, i+2); r.Text != want {
				t.Errorf("reply %q, want %q", r.Text, want)
			}
		}
		want := []string{"a:block:g", "a:m2", "a:m3", "a:m4", "a:m5", "a:m6"}
		if got := w.turns(); !slices.Equal(got, want) {
			t.Fatalf("turn order %v, want %v", got, want)
		}
		if w.maxInKey["a"] != 1 {
			t.Fatalf("turns of one key overlapped: %d at once", w.maxInKey["a"])
		}
	})
}

// TestKeysRunInParallel proves overlap without timing: each fake turn waits until all three are
// in flight, which can only happen if the keys run at the same time.
func TestKeysRunInParallel(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		w.barrierN = 3
		s := newSup(t, w, func(c *Config) { c.TurnDeadline = time.Minute })
		defer shutdown(t, s)
		var ps []*pending
		for _, k := range []string{"a", "b", "c"} {
			ps = append(ps, submitAsync(context.Background(), s, k, "barrier"))
		}
		for _, p := range ps {
			if _, err := p.wait(); err != nil {
				t.Fatalf("turn did not pass the barrier: %v", err)
			}
		}
		if w.maxTotal != 3 {
			t.Fatalf("max turns in flight = %d, want 3", w.maxTotal)
		}
	})
}

func TestQueueBound(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, func(c *Config) { c.MaxQueuePerKey = 2 })
		defer shutdown(t, s)
		ctx := context.Background()
		running := submitAsync(ctx, s, "a", "block:g")
		synctest.Wait()
		q1 := submitAsync(ctx, s, "a", "q1")
		q2 := submitAsync(ctx, s, "a", "q2")
		synctest.Wait()
		start := time.Now()
		_, err := s.Submit(ctx, "a", "q3")
		if !errors.Is(err, ErrQueueFull) {
			t.Fatalf("Submit past the bound: %v, want ErrQueueFull", err)
		}
		if time.Since(start) != 0 {
			t.Fatalf("ErrQueueFull took %s; want at once", time.Since(start))
		}
		// Another key is not affected.
		mustSubmit(t, s, "b", "hi")
		w.open("g")
		for _, p := range []*pending{running, q1, q2} {
			if _, err := p.wait(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func TestCancelledWaiterLeavesQueue(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, nil)
		defer shutdown(t, s)
		running := submitAsync(context.Background(), s, "a", "block:g")
		synctest.Wait()
		ctx, cancel := context.WithCancel(context.Background())
		gaveUp := submitAsync(ctx, s, "a", "cancelled")
		synctest.Wait()
		after := submitAsync(context.Background(), s, "a", "after")
		synctest.Wait()
		cancel()
		if _, err := gaveUp.wait(); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled waiter: %v, want context.Canceled", err)
		}
		if got := row(t, s, "a").Queued; got != 1 {
			t.Fatalf("queued after cancel = %d, want 1", got)
		}
		w.open("g")
		running.wait()
		if r, err := after.wait(); err != nil || r.Text != "reply #2: after" {
			t.Fatalf("after: %+v %v", r, err)
		}
		if got := w.turns(); slices.Contains(got, "a:cancelled") {
			t.Fatalf("cancelled message ran: %v", got)
		}
	})
}

// TestCancelRunningTurnInterrupts: cancelling the caller's ctx during its turn interrupts it and
// keeps the child.
func TestCancelRunningTurnInterrupts(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, nil)
		defer shutdown(t, s)
		ctx, cancel := context.WithCancel(context.Background())
		p := submitAsync(ctx, s, "a", "hang")
		synctest.Wait()
		cancel()
		if _, err := p.wait(); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		r := mustSubmit(t, s, "a", "next")
		if r.Text != "reply #2: next" || w.spawnCount() != 1 {
			t.Fatalf("after interrupt: %+v, spawns %d", r, w.spawnCount())
		}
	})
}

func TestCapLRUEviction(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, func(c *Config) { c.MaxChildren = 2 })
		defer shutdown(t, s)
		mustSubmit(t, s, "a", "a1")
		rb := mustSubmit(t, s, "b", "b1")
		mustSubmit(t, s, "a", "a2") // b is now the least recently used
		mustSubmit(t, s, "c", "c1")
		synctest.Wait()
		if !w.child(1).isDead() || w.child(0).isDead() {
			t.Fatalf("want b's child (LRU) evicted and a's kept: a dead=%v b dead=%v",
				w.child(0).isDead(), w.child(1).isDead())
		}
		st := s.Status()
		if st.Totals.Live != 2 || st.Totals.Retired[ReasonEvicted] != 1 {
			t.Fatalf("totals %+v", st.Totals)
		}
		// b comes back transparently: a new child resumes its thread and keeps its history.
		r := mustSubmit(t, s, "b", "b2")
		if r.Text != "reply #2: b2" || r.ThreadID != rb.ThreadID {
			t.Fatalf("b after eviction: %+v (thread before %s)", r, rb.ThreadID)
		}
		if res := w.resumed(); !slices.Equal(res, []string{rb.ThreadID}) {
			t.Fatalf("resumes %v, want [%s]", res, rb.ThreadID)
		}
		if w.maxAlive > 2 {
			t.Fatalf("cap overshot: %d children alive at once", w.maxAlive)
		}
		if got := row(t, s, "b").Restarts; got != 0 {
			t.Fatalf("eviction counted as restart: %d", got)
		}
	})
}

func TestWaitForSlot(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, func(c *Config) { c.MaxChildren = 1; c.SlotWait = 2 * time.Minute })
		defer shutdown(t, s)
		busy := submitAsync(context.Background(), s, "a", "block:g")
		synctest.Wait()
		waiting := submitAsync(context.Background(), s, "c", "c1")
		synctest.Wait()
		st := s.Status()
		if waiting.finished() || st.Totals.WaitingForSlot != 1 || st.Totals.Live != 1 {
			t.Fatalf("want c waiting for the only slot: finished=%v totals=%+v", waiting.finished(), st.Totals)
		}
		time.Sleep(time.Minute) // well within SlotWait
		w.open("g")
		if _, err := busy.wait(); err != nil {
			t.Fatal(err)
		}
		if r, err := waiting.wait(); err != nil || r.Text != "reply #1: c1" {
			t.Fatalf("c: %+v %v", r, err)
		}
		if w.maxAlive != 1 {
			t.Fatalf("cap 1 overshot: %d alive", w.maxAlive)
		}
	})
}

// The number of chat keys waiting for a slot is bounded: past MaxSlotWaiters a new key is
// refused at once instead of joining a queue that could grow with every caller.
func TestSlotWaitersBounded(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, func(c *Config) { c.MaxChildren = 1; c.MaxSlotWaiters = 2; c.SlotWait = time.Hour })
		defer shutdown(t, s)
		busy := submitAsync(context.Background(), s, "a", "block:g")
		synctest.Wait()
		w1 := submitAsync(context.Background(), s, "b", "b1")
		w2 := submitAsync(context.Background(), s, "c", "c1")
		synctest.Wait()
		if got := s.Status().Totals.WaitingForSlot; got != 2 {
			t.Fatalf("waiting for a slot: %d, want 2", got)
		}
		start := time.Now()
		_, err := s.Submit(context.Background(), "d", "d1")
		if !errors.Is(err, ErrNoSlot) {
			t.Fatalf("third waiter: err = %v, want ErrNoSlot", err)
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("third waiter refused after %s, want at once", d)
		}
		w.open("g")
		if _, err := busy.wait(); err != nil {
			t.Fatal(err)
		}
		for _, p := range []*pending{w1, w2} {
			if _, err := p.wait(); err != nil {
				t.Fatalf("a waiter within the bound failed: %v", err)
			}
		}
	})
}

func TestNoSlot(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, func(c *Config) { c.MaxChildren = 1; c.SlotWait = 30 * time.Second })
		defer shutdown(t, s)
		busy := submitAsync(context.Background(), s, "a", "block:g")
		synctest.Wait()
		start := time.Now()
		_, err := s.Submit(context.Background(), "c", "c1")
		if !errors.Is(err, ErrNoSlot) {
			t.Fatalf("err = %v, want ErrNoSlot", err)
		}
		if d := time.Since(start); d != 30*time.Second {
			t.Fatalf("gave up after %s, want SlotWait 30s", d)
		}
		if s.Status().Totals.WaitingForSlot != 0 {
			t.Fatal("waiter left behind")
		}
		// A waiter whose ctx ends leaves too.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := s.Submit(ctx, "d", "d1"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want DeadlineExceeded", err)
		}
		w.open("g")
		busy.wait()
		if w.spawnCount() != 1 {
			t.Fatalf("spawns %d, want 1", w.spawnCount())
		}
	})
}

func TestIdleTTL(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, func(c *Config) { c.IdleTTL = time.Minute })
		defer shutdown(t, s)
		r1 := mustSubmit(t, s, "a", "one")
		time.Sleep(59 * time.Second)
		synctest.Wait()
		if w.child(0).isDead() {
			t.Fatal("closed before the TTL")
		}
		mustSubmit(t, s, "a", "two") // use resets the clock
		time.Sleep(59 * time.Second)
		synctest.Wait()
		if w.child(0).isDead() {
			t.Fatal("closed before the TTL counted from last use")
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if !w.child(0).isDead() || w.child(0).closeCount() != 1 {
			t.Fatalf("idle child not closed: dead=%v closes=%d", w.child(0).isDead(), w.child(0).closeCount())
		}
		st := s.Status()
		if st.Totals.Live != 0 || st.Totals.Retired[ReasonIdle] != 1 {
			t.Fatalf("totals %+v", st.Totals)
		}
		r := mustSubmit(t, s, "a", "three")
		if r.Text != "reply #3: three" || !slices.Equal(w.resumed(), []string{r1.ThreadID}) {
			t.Fatalf("after idle close: %+v resumes %v", r, w.resumed())
		}
	})
}

// TestWatchdogs trips each turn watchdog after a healthy first turn and checks the key recovers
// on its next message.
func TestWatchdogs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		cfg      func(*Config)
		text     string
		watchdog string
		retired  bool // a new child is needed
		after    time.Duration
	}{
		{name: "turn deadline, interrupt honoured", cfg: func(c *Config) { c.TurnDeadline = 10 * time.Second },
			text: "hang", watchdog: WatchdogTurn, retired: false, after: 10 * time.Second},
		{name: "turn deadline, interrupt ignored", cfg: func(c *Config) {
			c.TurnDeadline = 10 * time.Second
			c.InterruptGrace = 3 * time.Second
		}, text: "wedge", watchdog: WatchdogWedged, retired: true, after: 13 * time.Second},
		{name: "post-tool quiet", cfg: func(c *Config) { c.PostToolQuiet = 5 * time.Second },
			text: "tool-quiet", watchdog: WatchdogPostTool, retired: true, after: 5 * time.Second},
		{name: "child dies mid-turn", text: "die", watchdog: WatchdogDead, retired: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeWorld()
				s := newSup(t, w, tc.cfg)
				defer shutdown(t, s)
				r1 := mustSubmit(t, s, "a", "hello")

				start := time.Now()
				r, err := s.Submit(context.Background(), "a", tc.text)
				var we *WatchdogError
				if !errors.As(err, &we) || we.Watchdog != tc.watchdog || we.ChatKey != "a" || we.PID != r1.PID {
					t.Fatalf("err = %v, want *WatchdogError %s for pid %d", err, tc.watchdog, r1.PID)
				}
				if d := time.Since(start); d != tc.after {
					t.Fatalf("tripped after %s, want %s", d, tc.after)
				}
				if r.ThreadID != r1.ThreadID {
					t.Fatalf("reply thread %q", r.ThreadID)
				}
				st := s.Status()
				if tc.retired {
					// Reaped before Submit returned.
					if !w.child(0).isDead() || w.child(0).closeCount() != 1 || st.Totals.Live != 0 ||
						st.Totals.Retired[tc.watchdog] != 1 {
						t.Fatalf("child not retired and reaped: closes=%d totals=%+v", w.child(0).closeCount(), st.Totals)
					}
				} else if w.child(0).isDead() || st.Totals.Live != 1 {
					t.Fatalf("child retired although it honoured the interrupt: %+v", st.Totals)
				}

				r3 := mustSubmit(t, s, "a", "again")
				if r3.Text != "reply #3: again" || r3.ThreadID != r1.ThreadID {
					t.Fatalf("recovery reply %+v", r3)
				}
				wantSpawns, wantRestarts, wantResumes := 1, 0, []string(nil)
				if tc.retired {
					wantSpawns, wantRestarts, wantResumes = 2, 1, []string{r1.ThreadID}
				}
				if w.spawnCount() != wantSpawns || !slices.Equal(w.resumed(), wantResumes) {
					t.Fatalf("spawns %d resumes %v, want %d %v", w.spawnCount(), w.resumed(), wantSpawns, wantResumes)
				}
				if got := row(t, s, "a").Restarts; got != wantRestarts {
					t.Fatalf("restarts %d, want %d", got, wantRestarts)
				}
			})
		})
	}
}

func TestDeadChildBetweenTurns(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, nil)
		defer shutdown(t, s)
		r1 := mustSubmit(t, s, "a", "hello")
		w.child(0).exit(errors.New("SIGKILL from outside"))
		synctest.Wait() // no message needed: the watcher notices
		st := s.Status()
		if st.Totals.Live != 0 || st.Totals.Retired[WatchdogDead] != 1 || w.child(0).closeCount() != 1 {
			t.Fatalf("dead child not noticed and reaped: closes=%d totals=%+v", w.child(0).closeCount(), st.Totals)
		}
		r := mustSubmit(t, s, "a", "again")
		if r.Text != "reply #2: again" || r.PID == r1.PID || !slices.Equal(w.resumed(), []string{r1.ThreadID}) {
			t.Fatalf("recovery: %+v resumes %v", r, w.resumed())
		}
		if got := row(t, s, "a").Restarts; got != 1 {
			t.Fatalf("restarts %d, want 1", got)
		}
	})
}

func TestHandshakeWatchdog(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		w.threads["thread-stored"] = []string{"old"}
		w.spawnHook = func(ctx context.Context, key string, n int) (bool, error) {
			if n == 1 {
				<-ctx.Done() // a child that never answers initialize
				return false, fmt.Errorf("initialize: %w", context.Cause(ctx))
			}
			return false, nil
		}
		s := newSup(t, w, func(c *Config) {
			c.HandshakeTimeout = 5 * time.Second
			c.Store = newTestStore("a", "thread-stored")
		})
		defer shutdown(t, s)
		start := time.Now()
		_, err := s.Submit(context.Background(), "a", "hi")
		var we *WatchdogError
		if !errors.As(err, &we) || we.Watchdog != WatchdogHandshake {
			t.Fatalf("err = %v, want handshake watchdog", err)
		}
		if d := time.Since(start); d != 5*time.Second {
			t.Fatalf("tripped after %s", d)
		}
		if st := s.Status(); st.Totals.Live != 0 || st.Totals.Retired[WatchdogHandshake] != 1 {
			t.Fatalf("totals %+v", st.Totals)
		}
		time.Sleep(2 * time.Second) // past the first backoff (≤ 1.5 s)
		r := mustSubmit(t, s, "a", "hi again")
		if r.Text != "reply #2: hi again" || !slices.Equal(w.resumed(), []string{"thread-stored"}) {
			t.Fatalf("recovery: %+v resumes %v", r, w.resumed())
		}
		if got := row(t, s, "a").Restarts; got != 1 {
			t.Fatalf("restarts %d, want 1", got)
		}
	})
}

func TestCrashLoopBackoff(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		hook func(ctx context.Context, key string, n int) (bool, error)
	}{
		{"spawn fails", func(context.Context, string, int) (bool, error) {
			return false, errors.New("exec: no such file")
		}},
		{"child dies at start", func(context.Context, string, int) (bool, error) { return true, nil }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeWorld()
				w.spawnHook = tc.hook
				s := newSup(t, w, nil)
				defer shutdown(t, s)

				// A message every 100 ms for a minute: 600 chances to spawn.
				var plain, loops int
				for i := 0; i < 600; i++ {
					_, err := s.Submit(context.Background(), "a", "hi")
					var cl *CrashLoopError
					switch {
					case errors.As(err, &cl):
						loops++
						if !cl.RetryAt.After(time.Now()) || cl.Failures < 1 || cl.ChatKey != "a" {
							t.Fatalf("crash loop error %+v at %s", cl, time.Now())
						}
					case err != nil:
						plain++
					default:
						t.Fatal("Submit succeeded on a broken spawn")
					}
					time.Sleep(100 * time.Millisecond)
				}
				// Backoff 1 s ×1.5 ±50%: 48–57 s reach 8–11 attempts within a minute.
				if n := w.spawnCount(); n < 6 || n > 12 || plain != n {
					t.Fatalf("%d spawns (%d plain errors) in a minute, want 6..12: no tight loop", n, plain)
				}
				if loops != 600-plain {
					t.Fatalf("%d crash-loop answers", loops)
				}

				// Recovery resets the backoff.
				w.mu.Lock()
				w.spawnHook = nil
				w.mu.Unlock()
				time.Sleep(5 * time.Minute) // past any interval
				mustSubmit(t, s, "a", "healthy")
				w.mu.Lock()
				w.spawnHook = tc.hook
				w.mu.Unlock()
				w.child(len(w.children) - 1).exit(errors.New("killed")) // after a completed turn: not a crash
				synctest.Wait()
				spawns := w.spawnCount()
				_, err := s.Submit(context.Background(), "a", "fails once")
				var cl *CrashLoopError
				if err == nil || errors.As(err, &cl) {
					t.Fatalf("first failure after reset: %v, want a plain error", err)
				}
				// One or two crashes are not a loop yet: the next messages wait out the backoff
				// (fake time passes) and try again, rather than failing at once.
				for n := 2; n <= DefaultCrashLoopAfter; n++ {
					before := time.Now()
					_, err = s.Submit(context.Background(), "a", "waits, then tries")
					if err == nil || errors.As(err, &cl) {
						t.Fatalf("crash %d after reset: %v, want a plain error after a retry", n, err)
					}
					if time.Since(before) <= 0 || w.spawnCount() != spawns+n {
						t.Fatalf("crash %d: waited %s, %d spawns; want a wait and one more spawn", n, time.Since(before), w.spawnCount()-spawns)
					}
				}
				_, err = s.Submit(context.Background(), "a", "backing off")
				if !errors.As(err, &cl) || cl.Failures != DefaultCrashLoopAfter || !cl.RetryAt.After(time.Now()) {
					t.Fatalf("after %d crashes: %v, want CrashLoopError", DefaultCrashLoopAfter, err)
				}
				if w.spawnCount() != spawns+DefaultCrashLoopAfter {
					t.Fatalf("spawned during backoff")
				}
			})
		})
	}
}

func TestStatusFields(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, func(c *Config) { c.MaxChildren = 3 })
		defer shutdown(t, s)
		ra := mustSubmit(t, s, "a", "one")
		time.Sleep(10 * time.Second)
		busy := submitAsync(context.Background(), s, "b", "block:g")
		synctest.Wait()
		queued := submitAsync(context.Background(), s, "b", "two")
		synctest.Wait()
		time.Sleep(3 * time.Second)

		st := s.Status()
		if len(st.Children) != 2 {
			t.Fatalf("children %+v", st.Children)
		}
		a, b := st.Children[0], st.Children[1]
		if a.ChatKey != "a" || a.State != StateIdle || a.Turns != 1 || a.ThreadID != ra.ThreadID ||
			a.PID != ra.PID || a.TurnAge != 0 || a.Uptime != 13*time.Second || a.Queued != 0 {
			t.Errorf("row a %+v", a)
		}
		if b.ChatKey != "b" || b.State != StateBusy || b.Turns != 0 || b.TurnAge != 3*time.Second ||
			b.Queued != 1 || b.Uptime != 3*time.Second || b.LastActivity.IsZero() || b.PID == 0 {
			t.Errorf("row b %+v", b)
		}
		want := Totals{Live: 2, Busy: 1, Queued: 1, Cap: 3, Turns: 1, Retired: map[string]int{}}
		if got := st.Totals; got.Live != want.Live || got.Busy != want.Busy || got.Queued != want.Queued ||
			got.Cap != want.Cap || got.Turns != want.Turns || len(got.Retired) != 0 {
			t.Errorf("totals %+v, want %+v", got, want)
		}
		w.open("g")
		busy.wait()
		queued.wait()
		if got := s.Status().Totals.Turns; got != 3 {
			t.Errorf("turns %d", got)
		}
	})
}

func TestShutdownDrains(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, nil)
		mustSubmit(t, s, "idle", "x")
		running := submitAsync(context.Background(), s, "a", "block:g")
		synctest.Wait()
		queued := submitAsync(context.Background(), s, "a", "queued")
		synctest.Wait()

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var shutErr error
		stopped := make(chan struct{})
		go func() { shutErr = s.Shutdown(ctx); close(stopped) }()
		synctest.Wait()
		if _, err := queued.wait(); !errors.Is(err, ErrClosed) {
			t.Fatalf("queued message: %v, want ErrClosed", err)
		}
		if _, err := s.Submit(context.Background(), "b", "late"); !errors.Is(err, ErrClosed) {
			t.Fatalf("Submit during shutdown: %v", err)
		}
		time.Sleep(20 * time.Second)
		w.open("g") // the running turn finishes inside the drain window
		if r, err := running.wait(); err != nil || r.Status != protocol.TurnCompleted {
			t.Fatalf("in-flight turn: %+v %v", r, err)
		}
		<-stopped
		if shutErr != nil {
			t.Fatalf("Shutdown: %v", shutErr)
		}
		for i := range w.children {
			if w.child(i).closeCount() != 1 {
				t.Fatalf("child %d closes %d", i, w.child(i).closeCount())
			}
		}
		if st := s.Status(); st.Totals.Live != 0 || st.Totals.Retired[ReasonShutdown] != 2 {
			t.Fatalf("totals %+v", st.Totals)
		}
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatalf("second Shutdown: %v", err)
		}
	})
}

func TestShutdownInterruptsAfterDrainTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, nil)
		running := submitAsync(context.Background(), s, "a", "hang")
		wedged := submitAsync(context.Background(), s, "b", "wedge")
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start := time.Now()
		err := s.Shutdown(ctx)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown: %v, want drain deadline", err)
		}
		if d := time.Since(start); d != 15*time.Second { // 10 s drain + 5 s interrupt grace of the wedged turn
			t.Fatalf("Shutdown took %s", d)
		}
		if _, err := running.wait(); !errors.Is(err, ErrClosed) {
			t.Fatalf("interrupted turn: %v, want ErrClosed cause", err)
		}
		var we *WatchdogError
		if _, err := wedged.wait(); !errors.As(err, &we) || we.Watchdog != WatchdogWedged {
			t.Fatalf("wedged turn: %v", err)
		}
		for i := range w.children {
			if !w.child(i).isDead() {
				t.Fatalf("child %d alive after Shutdown", i)
			}
		}
	})
}

func TestThreadRecordedAfterSettledTurn(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		store := newTestStore()
		s := newSup(t, w, func(c *Config) { c.Store = store })
		defer shutdown(t, s)

		// A turn that fails before turn/completed leaves no rollout: nothing recorded.
		if _, err := s.Submit(context.Background(), "a", "rpc-error"); err == nil {
			t.Fatal("rpc-error succeeded")
		}
		if _, ok := store.Get("a"); ok {
			t.Fatal("thread recorded without a settled turn")
		}
		p := submitAsync(context.Background(), s, "a", "block:g")
		synctest.Wait()
		if _, ok := store.Get("a"); ok {
			t.Fatal("thread recorded while its first turn runs")
		}
		w.open("g")
		r, err := p.wait()
		if err != nil {
			t.Fatal(err)
		}
		if id, _ := store.Get("a"); id != r.ThreadID || store.sets != 1 {
			t.Fatalf("store %q after %d sets, want %q once", id, store.sets, r.ThreadID)
		}
		mustSubmit(t, s, "a", "more")
		if store.sets != 1 {
			t.Fatalf("thread id rewritten every turn: %d sets", store.sets)
		}

		// A failed turn still settles: its thread is recorded.
		mustSubmit(t, s, "f", "fail")
		if _, ok := store.Get("f"); !ok {
			t.Fatal("failed (settled) turn not recorded")
		}
	})
}

func TestStoreErrorNotFatal(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		store := newTestStore()
		store.failSet = errors.New("disk full")
		s := newSup(t, w, func(c *Config) { c.Store = store })
		defer shutdown(t, s)
		r := mustSubmit(t, s, "a", "hi")
		if r.Text != "reply #1: hi" {
			t.Fatalf("reply %+v", r)
		}
		mustSubmit(t, s, "a", "again") // retried on the next turn
		if st := s.Status(); st.Totals.StoreErrors != 2 || store.sets != 2 {
			t.Fatalf("store errors %d sets %d", st.Totals.StoreErrors, store.sets)
		}
	})
}

func TestResumeThreadNotFound(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		store := newTestStore("a", "thread-lost")
		core, logs := observer.New(zapcore.InfoLevel)
		s := newSup(t, w, func(c *Config) { c.Store = store; c.Logger = zap.New(core) })
		defer shutdown(t, s)
		r := mustSubmit(t, s, "a", "hi")
		if !r.ResumeFailed || !r.NewThread || r.ThreadID == "thread-lost" || r.Text != "reply #1: hi" {
			t.Fatalf("reply %+v", r)
		}
		if id, _ := store.Get("a"); id != r.ThreadID {
			t.Fatalf("store has %q, want the new thread %q", id, r.ThreadID)
		}
		if logs.FilterMessageSnippet("cannot be resumed").FilterField(zap.String("thread_id", "thread-lost")).Len() != 1 {
			t.Fatalf("resume failure not logged: %v", logs.All())
		}
		r2 := mustSubmit(t, s, "a", "two")
		if r2.ResumeFailed || r2.NewThread {
			t.Fatalf("flags repeated on the second turn: %+v", r2)
		}
	})
}

// TestRerunOfUnfinishedTurn: a child that resumes a thread looks at the thread's last turn before
// its first turn, and drops it when it is an unfinished run of the message about to run (the
// daemon died mid-turn and the message came again). Anything else is kept, and a failed check
// or revert still runs the message.
func TestRerunOfUnfinishedTurn(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		status     string // of the stored thread's last turn
		text       string // of that turn
		lastErr    error
		revertErr  error
		wantRevert bool
		wantWarn   string
	}{
		{name: "interrupted, same text", status: protocol.TurnInterrupted, text: "again", wantRevert: true},
		{name: "in progress, same text", status: protocol.TurnInProgress, text: "again", wantRevert: true},
		{name: "interrupted, other text", status: protocol.TurnInterrupted, text: "other"},
		{name: "completed, same text", status: protocol.TurnCompleted, text: "again"},
		{name: "failed, same text", status: protocol.TurnFailed, text: "again"},
		{name: "last turn unreadable", status: protocol.TurnInterrupted, text: "again",
			lastErr: errors.New("thread/turns/list: -32603 boom"), wantWarn: "cannot read the thread's last turn"},
		{name: "revert refused", status: protocol.TurnInterrupted, text: "again",
			revertErr: errors.New("thread/revert: -32600 boom"), wantWarn: "cannot drop the unfinished earlier run"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeWorld()
				w.threads["thread-stored"] = []string{"first", tc.text}
				w.lastStatus["thread-stored"] = tc.status
				w.lastTurnErr, w.revertErr = tc.lastErr, tc.revertErr
				core, logs := observer.New(zapcore.WarnLevel)
				s := newSup(t, w, func(c *Config) { c.Store = newTestStore("a", "thread-stored"); c.Logger = zap.New(core) })
				defer shutdown(t, s)

				r := mustSubmit(t, s, "a", "again")
				wantHistory, wantReply, wantReverts := []string{"first", tc.text, "again"}, "reply #3: again", []string(nil)
				if tc.wantRevert {
					wantHistory, wantReply, wantReverts = []string{"first", "again"}, "reply #2: again", []string{"thread-stored/turn-2"}
				}
				lastTurns, reverts := w.history()
				if r.Text != wantReply || !slices.Equal(w.threads["thread-stored"], wantHistory) || !slices.Equal(reverts, wantReverts) {
					t.Errorf("reply %q history %q reverts %v; want %q, %q, %v", r.Text, w.threads["thread-stored"], reverts,
						wantReply, wantHistory, wantReverts)
				}
				if lastTurns != 1 {
					t.Errorf("last turn read %d times, want once", lastTurns)
				}
				if n := logs.FilterMessageSnippet(tc.wantWarn).Len(); tc.wantWarn != "" && n != 1 {
					t.Errorf("warning %q logged %d times: %v", tc.wantWarn, n, logs.All())
				}
				if tc.wantWarn == "" && logs.Len() != 0 {
					t.Errorf("unexpected warnings: %v", logs.All())
				}
			})
		})
	}
}

// TestWarmChildNeverReverts: a message run again on the child that ran its interrupted turn is
// the user's own repetition, and a new thread has nothing to look at: neither checks the history.
func TestWarmChildNeverReverts(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, nil)
		defer shutdown(t, s)
		mustSubmit(t, s, "a", "first")
		ctx, cancel := context.WithCancel(context.Background())
		p := submitAsync(ctx, s, "a", "block:g")
		synctest.Wait()
		cancel()
		if _, err := p.wait(); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled turn: %v", err)
		}
		w.open("g")
		r := mustSubmit(t, s, "a", "block:g")
		lastTurns, reverts := w.history()
		if r.Text != "reply #3: block:g" || lastTurns != 0 || len(reverts) != 0 || w.spawnCount() != 1 {
			t.Fatalf("reply %q, last turn read %d times, reverts %v, spawns %d; want reply #3 on the one warm child, no check",
				r.Text, lastTurns, reverts, w.spawnCount())
		}
	})
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	if _, err := New(Config{}); err == nil {
		t.Fatal("New without Spawn or AppServer.Bin succeeded")
	}
	if _, err := New(Config{Spawn: newFakeWorld().spawn, MaxChildren: -1}); err == nil {
		t.Fatal("negative MaxChildren accepted")
	}
}

// TestBacklogIsNotEvicted: a child between two queued turns of its key is not an eviction
// victim; the slot waiter gets it once the backlog is done.
func TestBacklogIsNotEvicted(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, func(c *Config) { c.MaxChildren = 1 })
		defer shutdown(t, s)
		ctx := context.Background()
		a1 := submitAsync(ctx, s, "a", "block:g")
		synctest.Wait()
		a2 := submitAsync(ctx, s, "a", "a2")
		synctest.Wait()
		c1 := submitAsync(ctx, s, "c", "c1")
		synctest.Wait()
		w.open("g")
		for _, p := range []*pending{a1, a2, c1} {
			if _, err := p.wait(); err != nil {
				t.Fatal(err)
			}
		}
		if got, want := w.turns(), []string{"a:block:g", "a:a2", "c:c1"}; !slices.Equal(got, want) {
			t.Fatalf("turns %v, want %v", got, want)
		}
		if w.spawnCount() != 2 {
			t.Fatalf("spawns %d, want 2 (a once, c once)", w.spawnCount())
		}
	})
}

// A child whose turn ended in a protocol error (an unreadable answer, while the process lives) is
// retired: codex may still run that turn and would merge the next turn/start into it. The next
// message resumes the thread on a new child.
func TestProtocolErrorRetiresChild(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, nil)
		defer shutdown(t, s)
		r1 := mustSubmit(t, s, "a", "hello")
		_, err := s.Submit(t.Context(), "a", "protocol-error")
		if !errors.Is(err, appserver.ErrProtocol) {
			t.Fatalf("err = %v, want it to wrap appserver.ErrProtocol", err)
		}
		var wd *WatchdogError
		if errors.As(err, &wd) {
			t.Fatalf("err = %v, a protocol error is not a watchdog trip", err)
		}
		st := s.Status()
		if st.Totals.Live != 0 || st.Totals.Retired[ReasonProtocol] != 1 || w.child(0).closeCount() != 1 {
			t.Fatalf("child not retired and reaped: closes=%d totals=%+v", w.child(0).closeCount(), st.Totals)
		}
		r := mustSubmit(t, s, "a", "again")
		if r.PID == r1.PID || !slices.Equal(w.resumed(), []string{r1.ThreadID}) {
			t.Fatalf("next message did not resume the thread on a new child: %+v resumes %v", r, w.resumed())
		}
	})
}

// A message waiting out a restart backoff (fewer than CrashLoopAfter crashes) leaves when its
// context ends, and gets ErrClosed when shutdown starts; neither spawns.
func TestCrashBackoffWaitHonoursCtxAndShutdown(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		w.spawnHook = func(context.Context, string, int) (bool, error) { return false, errors.New("exec: no such file") }
		s := newSup(t, w, nil)
		if _, err := s.Submit(context.Background(), "a", "first"); err == nil {
			t.Fatal("Submit succeeded on a broken spawn")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if _, err := s.Submit(ctx, "a", "gives up"); !errors.Is(err, context.DeadlineExceeded) || w.spawnCount() != 1 {
			t.Fatalf("Submit = %v after %d spawns, want the deadline and no new spawn", err, w.spawnCount())
		}
		errc := make(chan error, 1)
		go func() {
			_, err := s.Submit(context.Background(), "a", "waiting")
			errc <- err
		}()
		synctest.Wait() // the message is waiting out the backoff
		shutdown(t, s)
		if err := <-errc; !errors.Is(err, ErrClosed) || w.spawnCount() != 1 {
			t.Fatalf("Submit = %v after %d spawns, want ErrClosed and no new spawn", err, w.spawnCount())
		}
	})
}

// A symbolic link at children.json is neither read through (a planted record would pick the
// processes the sweep signals) nor replaced: New fails naming the path, a link planted while
// the supervisor runs makes the next record write fail, and the file behind it is untouched.
func TestChildrenFileRefusesSymlink(t *testing.T) {
	t.Parallel()
	t.Run("at start", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, ChildrenFile)
		v := atomicfiletest.PlantSymlink(t, path, []byte(`{"daemon_pid": 1, "children": []}`+"\n"))
		s, err := New(Config{Spawn: newFakeWorld().spawn, StateDir: dir})
		if err == nil {
			shutdown(t, s)
		}
		if !errors.Is(err, atomicfile.ErrSymlink) || !strings.Contains(err.Error(), path) {
			t.Fatalf("New = %v, want an error naming %s as a symbolic link", err, path)
		}
		v.AssertUntouched(t)
	})
	t.Run("while running", func(t *testing.T) {
		dir := t.TempDir()
		s, err := New(Config{Spawn: newFakeWorld().spawn, StateDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		defer shutdown(t, s)
		path := filepath.Join(dir, ChildrenFile)
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		v := atomicfiletest.PlantSymlink(t, path, nil)
		if err := s.pool.writeRecords(); !errors.Is(err, atomicfile.ErrSymlink) || !strings.Contains(err.Error(), path) {
			t.Fatalf("writeRecords = %v, want an error naming %s as a symbolic link", err, path)
		}
		v.AssertUntouched(t)
		if err := os.Remove(path); err != nil { // let Shutdown write its last record
			t.Fatal(err)
		}
	})
}

// Admit refuses a message before it is queued: Submit returns its error at once, wrapped with
// the chat key, and no child is started. Admitted messages run as usual.
func TestAdmitRefusesBeforeSpawn(t *testing.T) {
	t.Parallel()
	w := newFakeWorld()
	refuse := &appserver.AuthError{Msg: "no login"}
	var asked []string
	s, err := New(Config{Spawn: w.spawn, Admit: func(_ context.Context, key string) error {
		asked = append(asked, key)
		if key == "refused" {
			return refuse
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, s)
	_, err = s.Submit(context.Background(), "refused", "hi")
	var ae *appserver.AuthError
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("Submit = %v, want the Admit error naming the chat", err)
	}
	if n := w.spawnCount(); n != 0 {
		t.Fatalf("%d children started for a refused message", n)
	}
	if _, err := s.Submit(context.Background(), "welcome", "hi"); err != nil {
		t.Fatalf("admitted message: %v", err)
	}
	if n := w.spawnCount(); n != 1 || !slices.Equal(asked, []string{"refused", "welcome"}) {
		t.Fatalf("spawns %d, Admit asked for %v", n, asked)
	}
}

// A message's images follow its text as codex 0.169's image inputs ({"type":"image","url":...}),
// the shape turn/start and turn/steer take.
func TestUserInputImagesFollowText(t *testing.T) {
	t.Parallel()
	got, err := json.Marshal(userInput("look", []string{"data:image/png;base64,AAAA", "data:image/gif;base64,BBBB"}))
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"type":"text","text":"look"},{"type":"image","url":"data:image/png;base64,AAAA"},{"type":"image","url":"data:image/gif;base64,BBBB"}]`
	if string(got) != want {
		t.Errorf("input = %s\nwant    %s", got, want)
	}
}

// A child that failed to start or to open its thread is reported by why it was retired: shutdown
// first, then a watchdog's reason, else the error naming the chat and the child.
func TestStartError(t *testing.T) {
	t.Parallel()
	hs := fmt.Errorf("spawn: %w", appserver.ErrHandshakeTimeout)
	boom := errors.New("boom")
	if r := startFailureReason(hs); r != WatchdogHandshake {
		t.Errorf("reason of a handshake timeout = %q", r)
	}
	if r := startFailureReason(boom); r != ReasonStartFailed {
		t.Errorf("reason of another failure = %q", r)
	}
	if err := startError("k", 7, true, WatchdogHandshake, hs); err != ErrClosed {
		t.Errorf("closing: %v, want ErrClosed", err)
	}
	for _, reason := range []string{WatchdogHandshake, WatchdogDead} {
		var we *WatchdogError
		if err := startError("k", 7, false, reason, boom); !errors.As(err, &we) || we.Watchdog != reason || we.PID != 7 || we.ChatKey != "k" || !errors.Is(err, boom) {
			t.Errorf("%s: %v, want a WatchdogError of pid 7", reason, err)
		}
	}
	if err := startError("k", 0, false, ReasonStartFailed, boom); err.Error() != "chat k: start codex: boom" || !errors.Is(err, boom) {
		t.Errorf("spawn failure: %v", err)
	}
	if err := startError("k", 7, false, ReasonStartFailed, boom); err.Error() != "chat k: codex pid 7: boom" || !errors.Is(err, boom) {
		t.Errorf("thread failure: %v", err)
	}
}
