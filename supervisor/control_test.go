package supervisor

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/molecule-ai/codex-warm/internal/childproc"
)

// Stop interrupts the chat's running turn (its Submit gets the interrupted reply and
// ErrStopped), drops the messages queued behind it (ErrStopped, never run), does not wait behind
// them, leaves other chats alone, and the chat's next message runs on the same thread.
func TestStopInterruptsAndDropsQueue(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, nil)
		defer shutdown(t, s)
		first := mustSubmit(t, s, "a", "one")
		running := submitAsync(context.Background(), s, "a", "hang")
		synctest.Wait()
		q1 := submitAsync(context.Background(), s, "a", "q1")
		q2 := submitAsync(context.Background(), s, "a", "q2")
		other := submitAsync(context.Background(), s, "b", "block:b")
		synctest.Wait()

		res := s.Stop("a")
		if res != (StopResult{Interrupted: true, Dropped: 2}) {
			t.Fatalf("Stop = %+v, want the running turn and 2 queued", res)
		}
		r, err := running.wait()
		if !errors.Is(err, ErrStopped) || r.Status != "interrupted" || r.TurnID == "" {
			t.Fatalf("running turn: %+v, %v; want interrupted with ErrStopped", r, err)
		}
		for _, p := range []*pending{q1, q2} {
			if _, err := p.wait(); !errors.Is(err, ErrStopped) {
				t.Fatalf("queued message: %v, want ErrStopped", err)
			}
		}
		if slices.ContainsFunc(w.turns(), func(s string) bool { return strings.HasPrefix(s, "a:q") }) {
			t.Fatalf("a dropped message ran: %v", w.turns())
		}
		if other.finished() {
			t.Fatal("Stop of a ended another chat's turn")
		}
		w.open("b")
		if _, err := other.wait(); err != nil {
			t.Fatal(err)
		}
		if r := mustSubmit(t, s, "a", "after"); r.ThreadID != first.ThreadID || r.PID != first.PID || r.Text != "reply #3: after" {
			t.Fatalf("after stop: %+v, want the same child and thread (%+v)", r, first)
		}
		if got := s.Stop("a"); got != (StopResult{}) {
			t.Fatalf("Stop with nothing running = %+v", got)
		}
		if got := s.Stop("never-seen"); got != (StopResult{}) {
			t.Fatalf("Stop of an unknown chat = %+v", got)
		}
		if _, _, lastErr := s.ChatStatus("a"); lastErr != "" {
			t.Fatalf("last error after a good turn: %q", lastErr)
		}
	})
}

// Stop also ends a message whose child is still starting: no turn runs for it.
func TestStopWhileStarting(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		gate := make(chan struct{})
		w.spawnHook = func(ctx context.Context, key string, n int) (bool, error) {
			<-gate
			return false, nil
		}
		s := newSup(t, w, nil)
		defer shutdown(t, s)
		p := submitAsync(context.Background(), s, "a", "hello")
		synctest.Wait()
		if got := s.Stop("a"); !got.Interrupted {
			t.Fatalf("Stop = %+v", got)
		}
		close(gate)
		if _, err := p.wait(); !errors.Is(err, ErrStopped) {
			t.Fatalf("err = %v, want ErrStopped", err)
		}
		if len(w.turns()) != 0 {
			t.Fatalf("turns %v, want none", w.turns())
		}
		if _, _, lastErr := s.ChatStatus("a"); !strings.Contains(lastErr, ErrStopped.Error()) {
			t.Fatalf("last error %q", lastErr)
		}
	})
}

// Reset archives the chat's thread and retires its child; the next message opens a new thread.
// With a turn running, Reset is deferred: the running and queued messages finish on the old
// thread first.
func TestResetStartsANewThread(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		store := newTestStore()
		s := newSup(t, w, func(c *Config) { c.Store = store })
		defer shutdown(t, s)
		r1 := mustSubmit(t, s, "a", "one")
		synctest.Wait() // the key's worker finishes its bookkeeping after the reply is out
		res, err := s.Reset(context.Background(), "a")
		if err != nil || res.Deferred || res.OldThreadID != r1.ThreadID {
			t.Fatalf("Reset = %+v, %v; want thread %s archived now", res, err, r1.ThreadID)
		}
		if !w.child(0).isDead() || s.Status().Totals.Retired[ReasonReset] != 1 {
			t.Fatalf("the old thread's child still runs: %+v", s.Status().Totals)
		}
		r2 := mustSubmit(t, s, "a", "two")
		if r2.ThreadID == r1.ThreadID || !r2.NewThread || r2.Text != "reply #1: two" {
			t.Fatalf("after reset: %+v, want a new thread", r2)
		}
		if got := row(t, s, "a").Restarts; got != 0 {
			t.Fatalf("reset counted as a restart: %d", got)
		}

		// Deferred: behind a running turn and a queued message.
		running := submitAsync(context.Background(), s, "a", "block:g")
		synctest.Wait()
		queued := submitAsync(context.Background(), s, "a", "three")
		synctest.Wait()
		res, err = s.Reset(context.Background(), "a")
		if err != nil || !res.Deferred {
			t.Fatalf("Reset while busy = %+v, %v; want deferred", res, err)
		}
		w.open("g")
		running.wait()
		if r, err := queued.wait(); err != nil || r.ThreadID != r2.ThreadID {
			t.Fatalf("queued before the reset: %+v, %v; want the old thread %s", r, err, r2.ThreadID)
		}
		r4 := mustSubmit(t, s, "a", "four")
		if r4.ThreadID == r2.ThreadID || r4.Text != "reply #1: four" {
			t.Fatalf("after the deferred reset: %+v", r4)
		}
		want := []string{"a=" + r1.ThreadID, "a=" + r2.ThreadID}
		if !slices.Equal(store.archived, want) {
			t.Fatalf("archived %v, want %v", store.archived, want)
		}
	})
}

// ChatStatus is the chat's own row, names the last error, and reads only that chat's child's
// memory, not the whole pool's.
func TestChatStatus(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		var mu sync.Mutex
		reads := map[int]int{}
		s := newSup(t, w, func(c *Config) {
			c.MemorySampleInterval = -1
			c.Memory = func(pid int) (childproc.Memory, error) {
				mu.Lock()
				defer mu.Unlock()
				reads[pid]++
				return childproc.Memory{RSS: 3 << 20, PSS: 2 << 20, USS: 1 << 20}, nil
			}
		})
		other := mustSubmit(t, s, "b", "one")
		defer shutdown(t, s)
		if _, ok, _ := s.ChatStatus("a"); ok {
			t.Fatal("row for a chat with no child")
		}
		r := mustSubmit(t, s, "a", "one")
		if _, err := s.Submit(context.Background(), "a", "rpc-error"); err == nil {
			t.Fatal("rpc-error turn succeeded")
		}
		row, ok, lastErr := s.ChatStatus("a")
		if !ok || row.PID != r.PID || row.ThreadID != r.ThreadID || row.Turns != 2 || !strings.Contains(lastErr, "internal error") ||
			row.PSSBytes != 2<<20 {
			t.Fatalf("ChatStatus = %+v %v %q", row, ok, lastErr)
		}
		mu.Lock()
		defer mu.Unlock()
		if reads[other.PID] != 0 || reads[r.PID] != 1 {
			t.Fatalf("memory reads by pid %v: want one of a's child (%d) and none of b's (%d)", reads, r.PID, other.PID)
		}
	})
}

// A Stop right after a message was queued ends it, whatever its worker was doing at that moment:
// still queued, just taken out of the queue and not yet running, starting its child, or running
// its turn. Before the worker marked a job running as it took it from the queue, a Stop in
// between found the job neither queued nor running, and the message ran unstopped.
func TestStopRightAfterEnqueueAlwaysStops(t *testing.T) {
	w := newFakeWorld()
	s := newSup(t, w, nil)
	defer shutdown(t, s)
	for i := range 200 {
		tk, err := s.Enqueue(context.Background(), "a", "hang")
		if err != nil {
			t.Fatal(err)
		}
		res := s.Stop("a")
		if res == (StopResult{}) {
			t.Fatalf("round %d: Stop found nothing to stop", i)
		}
		if _, err := tk.Wait(); !errors.Is(err, ErrStopped) {
			t.Fatalf("round %d: %v, want ErrStopped", i, err)
		}
	}
}

// A message the inbox received before the chat's Stop but hands over after it is dropped; one
// received after the Stop runs.
func TestStopDropsMessagesReceivedBeforeIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, nil)
		defer shutdown(t, s)
		before := time.Now()
		time.Sleep(time.Millisecond) // synctest's clock: the Stop comes strictly later
		if got := s.Stop("a"); got != (StopResult{}) {
			t.Fatalf("Stop with nothing handed over = %+v", got)
		}
		_, err := s.SubmitInput(context.Background(), "a", Input{Text: "late", Received: before})
		if !errors.Is(err, ErrStopped) {
			t.Fatalf("message received before the Stop: %v, want ErrStopped", err)
		}
		time.Sleep(time.Millisecond)
		r, err := s.SubmitInput(context.Background(), "a", Input{Text: "after", Received: time.Now()})
		if err != nil || r.Text != "reply #1: after" {
			t.Fatalf("message received after the Stop: %+v, %v", r, err)
		}
		if slices.Contains(w.turns(), "a:late") {
			t.Fatalf("the dropped message ran: %v", w.turns())
		}
	})
}
