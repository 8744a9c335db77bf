package supervisor

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
)

func (w *fakeWorld) steers() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.steerLog...)
}

// BusySteer: a message for a chat whose turn runs is added to that turn; both Submits return the
// one turn's reply (the steered one marked Steered), no second turn runs, and the chat's next
// message is the thread's next turn.
func TestBusySteerMergesIntoRunningTurn(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, func(c *Config) { c.Busy = BusySteer })
		defer shutdown(t, s)
		first := submitAsync(context.Background(), s, "a", "block:g")
		synctest.Wait()
		second := submitAsync(context.Background(), s, "a", "also this")
		synctest.Wait()
		if second.finished() {
			t.Fatal("the steered message was answered before the turn ended")
		}
		w.open("g")
		r1, err1 := first.wait()
		r2, err2 := second.wait()
		if err1 != nil || err2 != nil {
			t.Fatalf("errors %v, %v", err1, err2)
		}
		if r1.Text != "reply #1: block:g + also this" || r1.Steered {
			t.Fatalf("running turn's reply %+v, want one reply to both texts", r1)
		}
		if r2.Text != r1.Text || r2.TurnID != r1.TurnID || !r2.Steered {
			t.Fatalf("steered message's reply %+v, want the running turn's (%s) marked Steered", r2, r1.TurnID)
		}
		if got := w.turns(); !slices.Equal(got, []string{"a:block:g"}) {
			t.Fatalf("turns %v, want the one turn", got)
		}
		if got := w.steers(); !slices.Equal(got, []string{"a:also this"}) {
			t.Fatalf("steers %v", got)
		}
		if r := mustSubmit(t, s, "a", "next"); r.Text != "reply #2: next" || r.Steered {
			t.Fatalf("next message: %+v", r)
		}
	})
}

// BusySteer: a message arriving before codex answered the running turn's turn/start (no turn id
// to steer into yet) waits for the answer and is steered, rather than queued behind a turn that
// may run for minutes.
func TestBusySteerWaitsForTheTurnID(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, func(c *Config) { c.Busy = BusySteer })
		defer shutdown(t, s)
		first := submitAsync(context.Background(), s, "a", "latestart:g")
		synctest.Wait()
		second := submitAsync(context.Background(), s, "a", "early")
		synctest.Wait()
		w.open("g")
		synctest.Wait()
		w.open("g-end")
		r1, err1 := first.wait()
		r2, err2 := second.wait()
		if err1 != nil || err2 != nil {
			t.Fatalf("errors %v, %v", err1, err2)
		}
		if r1.Text != "reply #1: latestart:g + early" || !r2.Steered || r2.TurnID != r1.TurnID {
			t.Fatalf("replies %+v and %+v, want one turn answering both", r1, r2)
		}
		if got := w.turns(); !slices.Equal(got, []string{"a:latestart:g"}) {
			t.Fatalf("turns %v, want the one turn", got)
		}
	})
}

// BusySteer falls back to queueing when codex refuses the steer (activeTurnNotSteerable), and
// when a message of the chat already waits (a steered message must not jump ahead of it).
func TestBusySteerRefusedQueues(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, func(c *Config) { c.Busy = BusySteer })
		defer shutdown(t, s)
		first := submitAsync(context.Background(), s, "a", "block:nosteer")
		synctest.Wait()
		refused := submitAsync(context.Background(), s, "a", "refused")
		synctest.Wait()
		behind := submitAsync(context.Background(), s, "a", "behind")
		synctest.Wait()
		w.open("nosteer")
		for _, p := range []*pending{first, refused, behind} {
			if r, err := p.wait(); err != nil || r.Steered {
				t.Fatalf("reply %+v, %v; want its own turn", r, err)
			}
		}
		if got := w.turns(); !slices.Equal(got, []string{"a:block:nosteer", "a:refused", "a:behind"}) {
			t.Fatalf("turns %v, want each message its own turn in order", got)
		}
		if got := w.steers(); len(got) != 0 {
			t.Fatalf("steers %v, want none", got)
		}
	})
}

// BusyInterrupt: the running turn is interrupted (ErrSuperseded, status interrupted) and the new
// message runs next on the same thread. Messages queued before it keep their order: only the
// running one is interrupted.
func TestBusyInterruptSupersedesRunningTurn(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		gate := make(chan struct{})
		w.spawnHook = func(ctx context.Context, key string, n int) (bool, error) {
			if key == "b" {
				<-gate
			}
			return false, nil
		}
		s := newSup(t, w, func(c *Config) { c.Busy = BusyInterrupt; c.Spares = 0 })
		defer shutdown(t, s)
		old := submitAsync(context.Background(), s, "a", "hang")
		synctest.Wait()
		newer := submitAsync(context.Background(), s, "a", "newer")
		r, err := old.wait()
		if !errors.Is(err, ErrSuperseded) || r.Status != "interrupted" || r.TurnID == "" {
			t.Fatalf("running turn: %+v, %v; want interrupted with ErrSuperseded", r, err)
		}
		if r2, err := newer.wait(); err != nil || r2.Text != "reply #2: newer" || r2.ThreadID != r.ThreadID {
			t.Fatalf("newer message: %+v, %v; want the thread's next turn", r2, err)
		}

		// Two messages arrive while chat b's first message is still at work (its child starting,
		// which ignores the interrupt until it is up): that message is interrupted, the two that
		// came during it both run, in order; the later one does not interrupt the earlier.
		running := submitAsync(context.Background(), s, "b", "starting")
		synctest.Wait()
		q1 := submitAsync(context.Background(), s, "b", "q1")
		synctest.Wait()
		q2 := submitAsync(context.Background(), s, "b", "q2")
		synctest.Wait()
		close(gate)
		if _, err := running.wait(); !errors.Is(err, ErrSuperseded) {
			t.Fatalf("running message: %v, want ErrSuperseded", err)
		}
		for _, p := range []*pending{q1, q2} {
			if _, err := p.wait(); err != nil {
				t.Fatal(err)
			}
		}
		want := []string{"a:hang", "a:newer", "b:q1", "b:q2"}
		if got := w.turns(); !slices.Equal(got, want) {
			t.Fatalf("turns %v, want %v", got, want)
		}
	})
}

// BusyQueue, the default: a message for a busy chat waits and runs as its own turn; nothing is
// steered or interrupted.
func TestBusyQueueUnchanged(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, nil)
		defer shutdown(t, s)
		first := submitAsync(context.Background(), s, "a", "block:g")
		synctest.Wait()
		second := submitAsync(context.Background(), s, "a", "second")
		synctest.Wait()
		if second.finished() {
			t.Fatal("the second message did not wait")
		}
		w.open("g")
		r1, err1 := first.wait()
		r2, err2 := second.wait()
		if err1 != nil || err2 != nil || r1.Text != "reply #1: block:g" || r2.Text != "reply #2: second" || r2.Steered {
			t.Fatalf("replies %+v %v / %+v %v", r1, err1, r2, err2)
		}
		if len(w.steers()) != 0 {
			t.Fatalf("steers %v", w.steers())
		}
	})
}

func TestParseBusyPolicy(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]BusyPolicy{"": BusyQueue, "queue": BusyQueue, "steer": BusySteer, "interrupt": BusyInterrupt} {
		if got, err := ParseBusyPolicy(in); err != nil || got != want {
			t.Errorf("ParseBusyPolicy(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseBusyPolicy("merge"); err == nil {
		t.Error("ParseBusyPolicy(merge): no error")
	}
	if _, err := New(Config{Spawn: newFakeWorld().spawn, Busy: "merge"}); err == nil {
		t.Error("New with an unknown busy policy: no error")
	}
}

// Messages whose steer codex refused are queued with the checks of any message: two that tried
// to steer at once, with room for one in the chat's queue, do not both wait there.
func TestBusySteerRefusedKeepsTheQueueCap(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		steering := w.gate("steering")
		w.steerHook = func() { <-steering }
		s := newSup(t, w, func(c *Config) { c.Busy = BusySteer; c.MaxQueuePerKey = 1 })
		defer shutdown(t, s)
		first := submitAsync(context.Background(), s, "a", "block:nosteer")
		synctest.Wait()
		m1 := submitAsync(context.Background(), s, "a", "one")
		m2 := submitAsync(context.Background(), s, "a", "two")
		synctest.Wait() // both wait in SteerTurn
		w.open("steering")
		synctest.Wait() // both refused: one queued, the other refused at the queue's cap
		w.open("nosteer")
		if _, err := first.wait(); err != nil {
			t.Fatal(err)
		}
		var full, answered int
		for _, p := range []*pending{m1, m2} {
			switch _, err := p.wait(); {
			case errors.Is(err, ErrQueueFull):
				full++
			case err == nil:
				answered++
			default:
				t.Fatalf("unexpected error %v", err)
			}
		}
		if full != 1 || answered != 1 {
			t.Fatalf("%d answered and %d refused as over the queue's cap of 1; want one of each", answered, full)
		}
	})
}
