package supervisor

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// spareRows returns the rows of the status table in state spare.
func spareRows(s *Supervisor) []ChildStatus {
	var out []ChildStatus
	for _, c := range s.Status().Children {
		if c.State == StateSpare {
			out = append(out, c)
		}
	}
	return out
}

// A spare is spawned before any message, handed to the first new chat (which runs its turn on
// the spare's child and its pre-started thread, with no spawn and no thread/start of its own),
// replaced in the background, and never handed to a second chat.
func TestSpareHandedOutOnceAndReplaced(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, func(c *Config) { c.MaxChildren = 4; c.Spares = 1 })
		defer shutdown(t, s)
		synctest.Wait()
		sp := spareRows(s)
		if len(sp) != 1 || w.spawnCount() != 1 || sp[0].ChatKey != "" || s.Status().Totals.Spares != 1 {
			t.Fatalf("after start: spares %+v, spawns %d, totals %+v", sp, w.spawnCount(), s.Status().Totals)
		}
		spare := sp[0]

		ra := mustSubmit(t, s, "a", "a1")
		if ra.PID != spare.PID || ra.ThreadID != spare.ThreadID || !ra.NewThread || ra.Text != "reply #1: a1" {
			t.Fatalf("a's first turn %+v, want it on the spare %+v", ra, spare)
		}
		synctest.Wait()
		sp = spareRows(s)
		if len(sp) != 1 || sp[0].PID == spare.PID || w.spawnCount() != 2 {
			t.Fatalf("spare not replaced: spares %+v, spawns %d", sp, w.spawnCount())
		}
		if a := row(t, s, "a"); a.State != StateIdle || a.PID != spare.PID {
			t.Fatalf("a's row %+v", a)
		}

		rb := mustSubmit(t, s, "b", "b1")
		if rb.PID == ra.PID || rb.ThreadID == ra.ThreadID || rb.PID != sp[0].PID {
			t.Fatalf("b %+v shares a's child or thread (%+v), or skipped the spare %+v", rb, ra, sp[0])
		}
		// a's next turn stays on its own child and thread.
		if r := mustSubmit(t, s, "a", "a2"); r.PID != ra.PID || r.Text != "reply #2: a2" {
			t.Fatalf("a2 %+v", r)
		}
		if w.resumed() != nil {
			t.Fatalf("resumes %v: chats with no stored thread need none", w.resumed())
		}
	})
}

// A chat with a stored thread resumes it on the spare; the spare's own thread is not used.
func TestSpareResumesStoredThread(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		w.threads["thread-old"] = []string{"earlier"}
		s := newSup(t, w, func(c *Config) { c.Spares = 1; c.Store = newTestStore("a", "thread-old") })
		defer shutdown(t, s)
		synctest.Wait()
		spare := spareRows(s)[0]
		r := mustSubmit(t, s, "a", "again")
		if r.PID != spare.PID || r.ThreadID != "thread-old" || r.NewThread || r.Text != "reply #2: again" {
			t.Fatalf("reply %+v, want the stored thread on spare pid %d", r, spare.PID)
		}
		if got := w.resumed(); !slices.Equal(got, []string{"thread-old"}) {
			t.Fatalf("resumes %v", got)
		}
	})
}

// Shutdown reaps the spares with the other children and waits for the spare keeper, even one
// that is starting a spare at that moment.
func TestSpareReapedAtShutdown(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		release := make(chan struct{})
		w.spawnHook = func(ctx context.Context, key string, n int) (bool, error) {
			if n == 3 { // the third spare hangs in its spawn until shutdown
				select {
				case <-release:
				case <-ctx.Done():
					return false, context.Cause(ctx)
				}
			}
			return false, nil
		}
		s := newSup(t, w, func(c *Config) { c.Spares = 2 })
		synctest.Wait()
		mustSubmit(t, s, "a", "a1") // takes one; the keeper starts the third spawn
		synctest.Wait()
		if got := s.Status().Totals; got.Spares != 2 || got.Live != 3 {
			t.Fatalf("totals %+v, want a starting spare beside a ready one and a", got)
		}
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			if c := w.child(i); !c.isDead() || c.closeCount() == 0 {
				t.Errorf("child %d not closed at shutdown", i)
			}
		}
		if st := s.Status(); st.Totals.Live != 0 || st.Totals.Retired[ReasonShutdown] != 2 {
			t.Fatalf("after shutdown %+v", st.Totals)
		}
	})
}

// Spares count against MaxChildren: at the cap no spare is started, and a chat that needs a
// slot gets the spare's before any chat's idle child is evicted.
func TestSpareCountsAgainstCapAndGoesFirst(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, func(c *Config) { c.MaxChildren = 2; c.Spares = 1 })
		defer shutdown(t, s)
		mustSubmit(t, s, "a", "a1") // a takes the first spare, a second one fills the cap
		synctest.Wait()
		if got := s.Status().Totals; got.Live != 2 || got.Spares != 1 {
			t.Fatalf("totals %+v", got)
		}
		mustSubmit(t, s, "b", "b1") // b takes it; the cap leaves no room for another
		synctest.Wait()
		if got := s.Status().Totals; got.Live != 2 || got.Spares != 0 || w.spawnCount() != 2 {
			t.Fatalf("at the cap: totals %+v, spawns %d", got, w.spawnCount())
		}
		if w.maxAlive > 2 {
			t.Fatalf("cap overshot: %d alive", w.maxAlive)
		}

		// A spare waiting beside an idle chat child is evicted first.
		sessions := map[*session]struct{}{}
		idle := &session{key: &keyState{key: "x"}, state: StateIdle, useSeq: 1}
		spare := &session{key: &keyState{}, state: StateSpare, spare: true, useSeq: 9}
		sessions[idle], sessions[spare] = struct{}{}, struct{}{}
		if v := lruIdle(sessions, func(string) int { return 0 }); v != spare {
			t.Fatalf("victim %+v, want the spare", v)
		}
	})
}

// A spare that fails to start backs the keeper off like a crashing chat child; a healthy one
// follows after the backoff. Chats meanwhile start their own children.
func TestSpareStartFailureBacksOff(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		w.spawnHook = func(ctx context.Context, key string, n int) (bool, error) {
			if n <= 2 {
				return false, errors.New("no codex today")
			}
			return false, nil
		}
		s := newSup(t, w, func(c *Config) { c.Spares = 1; c.CrashBackoffInitial = 10 * time.Second })
		defer shutdown(t, s)
		synctest.Wait()
		if w.spawnCount() != 1 || len(spareRows(s)) != 0 {
			t.Fatalf("spawns %d, spares %+v: want one failed try and a backoff", w.spawnCount(), spareRows(s))
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		st := s.Status()
		if len(spareRows(s)) != 1 || st.Totals.Retired[ReasonStartFailed] != 2 || w.spawnCount() != 3 {
			t.Fatalf("after the backoff: spawns %d, totals %+v", w.spawnCount(), st.Totals)
		}
	})
}

// A spare whose child dies is replaced; its death is not a chat's restart.
func TestSpareDeathReplaced(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, func(c *Config) { c.Spares = 1 })
		defer shutdown(t, s)
		synctest.Wait()
		w.child(0).exit(errors.New("killed"))
		synctest.Wait()
		// A young spare's death is a crash: the keeper waits out its backoff first.
		time.Sleep(time.Minute)
		synctest.Wait()
		sp := spareRows(s)
		if len(sp) != 1 || sp[0].PID != w.child(1).PID() || s.Status().Totals.Retired[WatchdogDead] != 1 {
			t.Fatalf("spares %+v, totals %+v", sp, s.Status().Totals)
		}
		if r := mustSubmit(t, s, "a", "a1"); r.PID != sp[0].PID {
			t.Fatalf("a ran on pid %d, not the replacement spare %d", r.PID, sp[0].PID)
		}
	})
}

// At the cap, a chat that finds a spare still starting waits for it and takes it, instead of
// evicting another chat's warm child.
func TestChatWaitsForStartingSpareAtCap(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		gate := make(chan struct{})
		w.spawnHook = func(ctx context.Context, key string, n int) (bool, error) {
			if n == 2 { // the second spare starts slowly
				<-gate
			}
			return false, nil
		}
		s := newSup(t, w, func(c *Config) { c.MaxChildren = 2; c.Spares = 1 })
		defer shutdown(t, s)
		synctest.Wait()
		ra := mustSubmit(t, s, "a", "a1") // takes the first spare; the second starts
		synctest.Wait()
		b := submitAsync(context.Background(), s, "b", "b1")
		synctest.Wait()
		if b.finished() || w.child(0).isDead() {
			t.Fatalf("b did not wait for the starting spare: finished %v, a's child dead %v", b.finished(), w.child(0).isDead())
		}
		close(gate)
		rb, err := b.wait()
		if err != nil {
			t.Fatal(err)
		}
		if rb.PID != w.child(1).PID() || w.child(0).isDead() || s.Status().Totals.Retired[ReasonEvicted] != 0 {
			t.Fatalf("b ran on pid %d (spare %d); a's child %d dead %v; totals %+v",
				rb.PID, w.child(1).PID(), ra.PID, w.child(0).isDead(), s.Status().Totals)
		}
	})
}

// A taken spare is replaced once the chat's first turn is over, not while it runs: a codex start
// beside the first turn would slow the message the spare is there for. A first turn that takes
// longer than spareReplaceDelay gets its replacement at that delay.
func TestSpareReplacedAfterTheFirstTurn(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, func(c *Config) { c.MaxChildren = 4; c.Spares = 1 })
		defer shutdown(t, s)
		synctest.Wait()
		if w.spawnCount() != 1 {
			t.Fatalf("%d spawns before any chat, want the spare's", w.spawnCount())
		}

		a := submitAsync(context.Background(), s, "a", "block:a")
		synctest.Wait()
		if w.spawnCount() != 1 || len(spareRows(s)) != 0 {
			t.Fatalf("while a's first turn runs: %d spawns, spares %+v; want no replacement yet", w.spawnCount(), spareRows(s))
		}
		w.open("a")
		if _, err := a.wait(); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if w.spawnCount() != 2 || len(spareRows(s)) != 1 {
			t.Fatalf("after a's first turn: %d spawns, spares %+v; want the spare replaced", w.spawnCount(), spareRows(s))
		}

		start := time.Now()
		b := submitAsync(context.Background(), s, "b", "block:b")
		synctest.Wait()
		if w.spawnCount() != 2 {
			t.Fatalf("b's first turn just began: %d spawns, want 2", w.spawnCount())
		}
		time.Sleep(spareReplaceDelay) // fake time: the bound passes while b's turn still runs
		synctest.Wait()
		if w.spawnCount() != 3 || len(spareRows(s)) != 1 || time.Since(start) != spareReplaceDelay {
			t.Fatalf("after %v of b's first turn: %d spawns, spares %+v; want the spare replaced at %v",
				time.Since(start), w.spawnCount(), spareRows(s), spareReplaceDelay)
		}
		w.open("b")
		if _, err := b.wait(); err != nil {
			t.Fatal(err)
		}
	})
}

// With shared children a taken spare is replaced at once (a thread in a running child is cheap
// to start, and the sooner codex opens its websocket the better); only the thread's name and
// the children record wait for the chat's first turn.
func TestSharedSpareReplacedAtOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, func(c *Config) { c.MaxChildren = 4; c.Spares = 1; c.ThreadsPerChild = 4 })
		defer shutdown(t, s)
		synctest.Wait()
		first := spareRows(s)
		if len(first) != 1 {
			t.Fatalf("spares before any chat: %+v, want 1", first)
		}
		start := time.Now()
		a := submitAsync(context.Background(), s, "a", "block:a")
		synctest.Wait()
		sp := spareRows(s)
		if len(sp) != 1 || sp[0].ThreadID == first[0].ThreadID || time.Since(start) != 0 {
			t.Fatalf("while a's first turn runs, at %v: spares %+v; want a new one at once", time.Since(start), sp)
		}
		w.open("a")
		if _, err := a.wait(); err != nil {
			t.Fatal(err)
		}
	})
}
