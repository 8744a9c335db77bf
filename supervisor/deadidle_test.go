package supervisor

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
)

// A message for an idle chat whose child has died, before the child's watcher retired it (a
// shared child's death retires its threads one by one), waits for that and gets a new child,
// not the dead child's error.
func TestMessageForAChildDeadButNotYetRetiredGetsANewChild(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, nil)
		defer shutdown(t, s)

		mustSubmit(t, s, "canvas:a", "hello")
		dead := w.child(0)
		dead.dieUnseen(errors.New("SIGKILL from outside"))
		next := submitAsync(context.Background(), s, "canvas:a", "after the crash")
		synctest.Wait()
		select {
		case <-next.done:
			r, err := next.wait()
			t.Fatalf("answered before the dead child was retired: %+v, %v", r, err)
		default:
		}
		dead.exit(errors.New("SIGKILL from outside"))
		r, err := next.wait()
		if err != nil {
			t.Fatalf("the message after the death: %v, want a reply from a new child", err)
		}
		if r.PID == dead.pid || w.spawnCount() != 2 {
			t.Fatalf("answered by pid %d (dead %d) after %d spawns, want a second child", r.PID, dead.pid, w.spawnCount())
		}
	})
}
