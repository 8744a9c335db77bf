package supervisor

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
)

// A stop that comes as a new image takes over: Shutdown begins while the turn the previous
// image handed over still waits in its chat's queue (its worker has not taken it yet), and the
// message given again attaches to it after that. The message is owed its turn's reply, not
// ErrClosed ("shutting down"): the drain lets the handed-over turn run to its end.
func TestShutdownAnswersHandedOverTurnStillQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, nil)
		// A job of the chat's own holds its worker, so that the turn adopted next stays in the
		// queue, as it does in the moments before its worker first runs; the test then decides
		// when the worker goes on.
		hold := make(chan struct{})
		held := make(chan error, 1)
		go func() {
			_, err := s.chats.onWorker(context.Background(), "a", func(*keyState, func()) error {
				<-hold
				return nil
			})
			held <- err
		}()
		synctest.Wait()
		spawned, err := w.spawn(context.Background(), "a")
		if err != nil {
			t.Fatal(err)
		}
		child := &resumingChild{fakeChild: spawned.(*fakeChild), text: "block:g"}
		s.adopt([]AdoptedChild{{ChatKey: "a", ThreadID: "thread-handed", Turns: 1, Child: child,
			Turn: &HandedTurn{MessageID: "m1"}}})

		stopped := make(chan error, 1)
		go func() { stopped <- s.Shutdown(context.Background()) }()
		synctest.Wait() // Shutdown failed what it fails, and waits for the chat's worker
		attached := submitInputAsync(s, "a", Input{Text: "block:g", MessageID: "m1"})
		synctest.Wait()
		answeredEarly := attached.finished()
		close(hold)
		w.open("g")
		r, err := attached.wait()
		if serr := <-stopped; serr != nil {
			t.Errorf("Shutdown: %v", serr)
		}
		if herr := <-held; herr != nil {
			t.Errorf("the job that held the worker: %v", herr)
		}
		if errors.Is(err, ErrClosed) || answeredEarly {
			t.Fatalf("the handed-over message was answered %v before its turn ended (early %v), want its turn's reply", err, answeredEarly)
		}
		if err != nil || r.Text == "" {
			t.Fatalf("the handed-over message: %+v %v, want its turn's reply", r, err)
		}
		if child.resumed != 1 || w.spawnCount() != 1 {
			t.Fatalf("turn resumed %d times, %d spawns; want the handed-over turn resumed once, no spawn", child.resumed, w.spawnCount())
		}
	})
}
