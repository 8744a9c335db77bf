package supervisor

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
)

// pausableChild is a fake child that a reload can pause, as the appserver client can.
type pausableChild struct {
	*fakeChild
	paused, resumed int
}

func (c *pausableChild) Pause(context.Context) (appserver.Handover, error) {
	c.paused++
	return appserver.Handover{PID: c.PID()}, nil
}

func (c *pausableChild) Resume() { c.resumed++ }

// Freeze refuses at once (ErrCannotCross, no wait for its deadline) while a turn runs whose
// message has no id, which could not be handed over, and the pool serves on. A child that cannot
// be paused refuses the freeze the same way.
func TestFreezeRefusesTurnsThatCannotCrossAndServesOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, nil)
		p := submitAsync(context.Background(), s, "a", "block:g")
		synctest.Wait()
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := s.Freeze(ctx)
		cancel()
		if !errors.Is(err, ErrCannotCross) || !strings.Contains(err.Error(), "chat a") {
			t.Fatalf("Freeze during a turn that cannot cross: %v", err)
		}
		if waited := time.Since(start); waited != 0 {
			t.Fatalf("Freeze waited %s (fake clock) before refusing", waited)
		}
		w.open("g")
		if _, err := p.wait(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Freeze(context.Background()); !errors.Is(err, appserver.ErrNoHandover) {
			t.Fatalf("Freeze of a child that cannot be paused: %v", err)
		}
		if _, err := s.Submit(context.Background(), "a", "after"); err != nil {
			t.Fatalf("Submit after a refused freeze: %v", err)
		}
		shutdown(t, s)
	})
}

// A frozen pool hands its idle children over and refuses messages (ErrReloading) until Thaw,
// which resumes the children.
func TestFreezeHandsIdleChildrenOverUntilThaw(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		var kids []*pausableChild
		s := newSup(t, w, func(c *Config) {
			c.Spawn = func(ctx context.Context, key string) (Child, error) {
				ch, err := w.spawn(ctx, key)
				if err != nil {
					return nil, err
				}
				pc := &pausableChild{fakeChild: ch.(*fakeChild)}
				kids = append(kids, pc)
				return pc, nil
			}
		})
		for _, key := range []string{"a", "b"} {
			if _, err := s.Submit(context.Background(), key, "hello"); err != nil {
				t.Fatal(err)
			}
		}
		handed, err := s.Freeze(context.Background())
		if err != nil || len(handed) != 2 {
			t.Fatalf("Freeze: %d children, %v", len(handed), err)
		}
		for _, h := range handed {
			if h.ThreadID == "" || h.Handover.PID == 0 || (h.ChatKey != "a" && h.ChatKey != "b") {
				t.Fatalf("handed over %+v", h)
			}
		}
		if _, err := s.Submit(context.Background(), "a", "while frozen"); !errors.Is(err, ErrReloading) {
			t.Fatalf("Submit while frozen: %v", err)
		}
		s.Thaw()
		for _, k := range kids {
			if k.paused != 1 || k.resumed != 1 {
				t.Fatalf("child %d paused %d resumed %d times", k.PID(), k.paused, k.resumed)
			}
		}
		if _, err := s.Submit(context.Background(), "a", "thawed"); err != nil {
			t.Fatalf("Submit after Thaw: %v", err)
		}
		if w.spawnCount() != 2 {
			t.Fatalf("%d spawns, want 2", w.spawnCount())
		}
		shutdown(t, s)
	})
}

// A child handed over by the previous image is its chat's warm child: the chat's next message
// runs on it without a spawn or a thread resume.
func TestAdoptedChildIsWarm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		old := newSup(t, w, nil)
		first, err := old.Submit(context.Background(), "a", "hello")
		if err != nil {
			t.Fatal(err)
		}
		child := w.child(0)
		// What the previous image leaves: the child, alive, and its chat's thread.
		s := newSup(t, w, func(c *Config) {
			c.Adopted = []AdoptedChild{{ChatKey: "a", ThreadID: first.ThreadID, Turns: 1, Child: child}}
		})
		r, err := s.Submit(context.Background(), "a", "again")
		if err != nil || r.ThreadID != first.ThreadID {
			t.Fatalf("Submit on the adopted child: %+v %v", r, err)
		}
		if w.spawnCount() != 1 || len(w.resumed()) != 0 {
			t.Fatalf("spawns %d, resumes %v; want the adopted child used as it is", w.spawnCount(), w.resumed())
		}
		if st, ok, _ := s.ChatStatus("a"); !ok || st.PID != child.PID() || st.Turns != 2 {
			t.Fatalf("chat status %+v %v", st, ok)
		}
		shutdown(t, s)
		shutdown(t, old)
	})
}
