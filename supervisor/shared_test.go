package supervisor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/appserver/appservertest"
)

// Shared children (Config.ThreadsPerChild > 1) on fake app-server processes behind the real
// client. FakeMarked makes a turn hang ("hang"), ignore its interrupt ("wedge") or kill its
// child ("die") by its text.

func sharedSup(t *testing.T, perChild int, edit func(*Config)) (*Supervisor, *fakeSpawner) {
	t.Helper()
	cfg := processCfg(t, mode(appservertest.FakeMarked, appservertest.FakeMarked))
	sp := &fakeSpawner{modeFor: mode(appservertest.FakeMarked, appservertest.FakeMarked), log: cfg.Logger}
	cfg.Spawn = sp.spawn
	cfg.ThreadsPerChild = perChild
	cfg.Store = newTestStore()
	if edit != nil {
		edit(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shutdown(t, s) })
	return s, sp
}

func mustAnswer(t *testing.T, s *Supervisor, ctx context.Context, key, text, want string) Reply {
	t.Helper()
	r, err := s.Submit(ctx, key, text)
	if err != nil {
		t.Fatalf("chat %s %q: %v", key, text, err)
	}
	if r.Text != want {
		t.Fatalf("chat %s %q: reply %q, want %q", key, text, r.Text, want)
	}
	return r
}

func TestSharedChatsFillChildren(t *testing.T) {
	t.Parallel()
	s, sp := sharedSup(t, 4, nil)
	ctx := testCtx(t)
	pids := map[int][]string{}
	for i := range 8 {
		key := fmt.Sprintf("chat-%d", i)
		r := mustAnswer(t, s, ctx, key, "hi", "reply #1: hi")
		pids[r.PID] = append(pids[r.PID], key)
	}
	if len(pids) != 2 || sp.n.Load() != 2 {
		t.Fatalf("8 chats in %d children (%d spawned), want 2 of 4: %v", len(pids), sp.n.Load(), pids)
	}
	st := s.Status()
	if st.Totals.Children != 2 || st.Totals.Live != 8 || st.Totals.ThreadsPerChild != 4 {
		t.Errorf("totals: %d children, %d live, %d per child; want 2, 8, 4", st.Totals.Children, st.Totals.Live, st.Totals.ThreadsPerChild)
	}
	for _, c := range st.Children {
		if c.Threads != 4 {
			t.Errorf("chat %s: %d threads in its child %d, want 4", c.ChatKey, c.Threads, c.PID)
		}
	}
	// Each chat keeps its own thread in the shared child.
	for i := range 8 {
		mustAnswer(t, s, ctx, fmt.Sprintf("chat-%d", i), "again", "reply #2: again")
	}
}

func TestSharedHungTurnHoldsNoNeighbourAndStops(t *testing.T) {
	t.Parallel()
	s, _ := sharedSup(t, 4, nil)
	ctx := testCtx(t)
	a := mustAnswer(t, s, ctx, "a", "hi", "reply #1: hi")
	hung := make(chan error, 1)
	go func() {
		_, err := s.Submit(ctx, "a", "hang on")
		hung <- err
	}()
	waitFor(t, "chat a's turn to run", func() bool { return stateOf(s, "a") == StateBusy })
	b := mustAnswer(t, s, ctx, "b", "hi", "reply #1: hi")
	if b.PID != a.PID {
		t.Fatalf("chat b in pid %d, chat a in %d: want one shared child", b.PID, a.PID)
	}
	mustAnswer(t, s, ctx, "b", "more", "reply #2: more")
	if res := s.Stop("a"); !res.Interrupted {
		t.Fatalf("stop: %+v", res)
	}
	if err := <-hung; !errors.Is(err, ErrStopped) {
		t.Fatalf("the hung turn after /stop: %v, want ErrStopped", err)
	}
	r := mustAnswer(t, s, ctx, "a", "back", "reply #3: back")
	if r.PID != a.PID {
		t.Errorf("chat a after the stop in pid %d, want its child %d kept", r.PID, a.PID)
	}
}

func TestSharedEvictionUnloadsThread(t *testing.T) {
	t.Parallel()
	// One child of two threads: a third chat evicts the least recently used, whose thread is
	// unloaded, and takes its place in the same child.
	s, sp := sharedSup(t, 2, func(c *Config) { c.MaxChildren = 1 })
	ctx := testCtx(t)
	a := mustAnswer(t, s, ctx, "a", "hi", "reply #1: hi")
	mustAnswer(t, s, ctx, "b", "hi", "reply #1: hi")
	c := mustAnswer(t, s, ctx, "c", "hi", "reply #1: hi")
	if c.PID != a.PID || sp.n.Load() != 1 {
		t.Fatalf("chat c in pid %d (a in %d), %d children spawned: want the evicted thread's place", c.PID, a.PID, sp.n.Load())
	}
	st := s.Status()
	if st.Totals.Retired[ReasonEvicted] != 1 || st.Totals.Live != 2 {
		t.Fatalf("totals %+v, want one eviction and two chats warm", st.Totals)
	}
	// Chat a comes back: its thread is resumed (the fake counts from 1 again in a resumed
	// thread), after another eviction, in the same child.
	r := mustAnswer(t, s, ctx, "a", "back", "reply #1: back")
	if r.PID != a.PID || r.ThreadID != a.ThreadID || r.NewThread {
		t.Errorf("chat a back: %+v, want its thread %s resumed in pid %d", r, a.ThreadID, a.PID)
	}
}

func TestSharedChildKilledMidTurn(t *testing.T) {
	t.Parallel()
	s, _ := sharedSup(t, 4, nil)
	ctx := testCtx(t)
	a := mustAnswer(t, s, ctx, "a", "hi", "reply #1: hi")
	mustAnswer(t, s, ctx, "b", "hi", "reply #1: hi")
	mustAnswer(t, s, ctx, "c", "hi", "reply #1: hi")
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, key := range []string{"a", "b"} {
		wg.Go(func() { _, errs[i] = s.Submit(ctx, key, "hang on") })
	}
	waitFor(t, "both turns to run", func() bool { return stateOf(s, "a") == StateBusy && stateOf(s, "b") == StateBusy })
	if err := syscall.Kill(a.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, err := range errs {
		var we *WatchdogError
		if !errors.As(err, &we) || we.Watchdog != WatchdogDead {
			t.Errorf("message %d mid-turn at the kill: %v, want the child_died watchdog", i, err)
		}
	}
	if !processGone(a.PID) {
		t.Errorf("killed child %d not reaped", a.PID)
	}
	// Every chat goes on, history and all (the fake's count restarts in a resumed thread).
	for _, key := range []string{"a", "b", "c"} {
		r := mustAnswer(t, s, ctx, key, "after", "reply #1: after")
		if r.PID == a.PID || r.NewThread {
			t.Errorf("chat %s after the kill: %+v", key, r)
		}
	}
}

func TestSharedChatThatKillsChildrenGetsItsOwn(t *testing.T) {
	t.Parallel()
	s, _ := sharedSup(t, 4, nil)
	ctx := testCtx(t)
	mustAnswer(t, s, ctx, "quiet", "hi", "reply #1: hi")
	_, err := s.Submit(ctx, "killer", "die")
	var we *WatchdogError
	if !errors.As(err, &we) || we.Watchdog != WatchdogDead {
		t.Fatalf("the turn that killed its child: %v", err)
	}
	st := s.Status()
	if st.Totals.CrashBackoffs != 1 {
		t.Errorf("%d crash backoffs, want 1: the killer's (its neighbour was idle)", st.Totals.CrashBackoffs)
	}
	k := mustAnswer(t, s, ctx, "killer", "hi", "reply #1: hi")
	q := mustAnswer(t, s, ctx, "quiet", "again", "reply #1: again")
	if k.PID == q.PID {
		t.Fatalf("the chat that killed a child shares pid %d with its neighbour", k.PID)
	}
	if th := row(t, s, "killer").Threads; th != 1 {
		t.Errorf("the killer's child holds %d threads, want its own", th)
	}
	// After a completed turn it shares again: the next chat placed may join it... but a new
	// child was placed for quiet before; a third chat goes to quiet's child (the fullest).
	n := mustAnswer(t, s, ctx, "new", "hi", "reply #1: hi")
	if n.PID != q.PID {
		t.Errorf("a new chat in pid %d, want the shared child %d", n.PID, q.PID)
	}
}

func TestSharedWedgedThreadRetiresItsChild(t *testing.T) {
	t.Parallel()
	s, _ := sharedSup(t, 4, func(c *Config) {
		c.TurnDeadline = 3 * time.Second
		c.InterruptGrace = 300 * time.Millisecond
	})
	ctx := testCtx(t)
	b := mustAnswer(t, s, ctx, "b", "hi", "reply #1: hi")
	_, err := s.Submit(ctx, "a", "wedge")
	var we *WatchdogError
	if !errors.As(err, &we) || we.Watchdog != WatchdogWedged {
		t.Fatalf("a turn that ignored its interrupt: %v, want the wedged watchdog", err)
	}
	// Its thread cannot leave the child: the child drained (chat b's idle thread left it) and
	// ended before the wedged chat's reply.
	if !processGone(b.PID) {
		t.Errorf("the shared child %d holding a wedged thread is still running", b.PID)
	}
	st := s.Status()
	if st.Totals.Retired[ReasonHostDrain] != 1 {
		t.Errorf("retired %v, want chat b's thread moved out by the drain", st.Totals.Retired)
	}
	r := mustAnswer(t, s, ctx, "b", "after", "reply #1: after")
	if r.PID == b.PID || r.ThreadID != b.ThreadID {
		t.Errorf("chat b after the drain: %+v", r)
	}
	mustAnswer(t, s, ctx, "a", "after", "reply #1: after")
}

func TestSharedChildRecycledAfterMaxTurns(t *testing.T) {
	t.Parallel()
	s, _ := sharedSup(t, 4, func(c *Config) { c.ChildMaxTurns = 3 })
	ctx := testCtx(t)
	a := mustAnswer(t, s, ctx, "a", "one", "reply #1: one")
	mustAnswer(t, s, ctx, "b", "one", "reply #1: one")
	// The child's third turn recycles it: b's idle thread leaves with it.
	mustAnswer(t, s, ctx, "a", "two", "reply #2: two")
	// The last thread to leave ends the child; its session is done once the child was reaped.
	waitFor(t, "the recycled child to end", func() bool { return processGone(a.PID) && s.Status().Totals.Live == 0 })
	st := s.Status()
	if st.Totals.Live != 0 || st.Totals.Retired[ReasonHostDrain] != 2 {
		t.Errorf("totals %+v, want both threads moved out", st.Totals)
	}
	for _, key := range []string{"a", "b"} {
		if r := mustAnswer(t, s, ctx, key, "next", "reply #1: next"); r.PID == a.PID {
			t.Errorf("chat %s still in the recycled child", key)
		}
	}
}

func TestSharedDrainInterruptsTurnsPastTheBound(t *testing.T) {
	t.Parallel()
	s, _ := sharedSup(t, 4, func(c *Config) {
		c.ChildMaxTurns = 1
		c.HostDrain = 300 * time.Millisecond
	})
	ctx := testCtx(t)
	hung := make(chan error, 1)
	go func() {
		_, err := s.Submit(ctx, "a", "hang on")
		hung <- err
	}()
	waitFor(t, "chat a's turn to run", func() bool { return stateOf(s, "a") == StateBusy })
	pid := row(t, s, "a").PID
	// Chat b's turn is the child's first to end: the child recycles, and chat a's turn, still
	// running past the drain bound, is interrupted.
	b := mustAnswer(t, s, ctx, "b", "hi", "reply #1: hi")
	if b.PID != pid {
		t.Fatalf("chat b in pid %d, want the shared child %d", b.PID, pid)
	}
	if err := <-hung; !errors.Is(err, errHostDrained) {
		t.Fatalf("the turn running in the draining child: %v, want it interrupted by the drain", err)
	}
	waitFor(t, "the drained child to end", func() bool { return processGone(pid) && s.Status().Totals.Live == 0 })
	if r := mustAnswer(t, s, ctx, "a", "back", "reply #1: back"); r.PID == pid {
		t.Errorf("chat a still in the drained child")
	}
}

// stateOf is chatKey's child's state, "" while it has none.
func stateOf(s *Supervisor, chatKey string) State {
	for _, c := range s.Status().Children {
		if c.ChatKey == chatKey {
			return c.State
		}
	}
	return ""
}
