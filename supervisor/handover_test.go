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

// A shared child (ThreadsPerChild > 1) is paused once and handed over with all its chats'
// threads; the next image's pool adopts it as one child holding each chat's warm thread, and a
// pool of one child per chat closes it instead (its chats resume elsewhere).
func TestFreezeHandsSharedChildOverWithItsThreads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		var kids []*pausableChild
		shared := func(c *Config) {
			c.ThreadsPerChild = 4
			c.Spawn = func(ctx context.Context, key string) (Child, error) {
				ch, err := w.spawn(ctx, key)
				if err != nil {
					return nil, err
				}
				pc := &pausableChild{fakeChild: ch.(*fakeChild)}
				kids = append(kids, pc)
				return pc, nil
			}
		}
		s := newSup(t, w, shared)
		threads := map[string]string{}
		for _, key := range []string{"a", "b", "c"} {
			r, err := s.Submit(context.Background(), key, "hello")
			if err != nil {
				t.Fatal(err)
			}
			threads[key] = r.ThreadID
		}
		handed, err := s.Freeze(context.Background())
		if err != nil || len(handed) != 1 || len(kids) != 1 || kids[0].paused != 1 {
			t.Fatalf("Freeze: %+v %v; want one child paused once", handed, err)
		}
		h := handed[0]
		got := map[string]string{h.ChatKey: h.ThreadID}
		for _, th := range h.Shared {
			got[th.ChatKey] = th.ThreadID
		}
		if len(got) != 3 || got["a"] != threads["a"] || got["b"] != threads["b"] || got["c"] != threads["c"] {
			t.Fatalf("handed over %v, want every chat's thread %v", got, threads)
		}
		adopted := AdoptedChild{ChatKey: h.ChatKey, ThreadID: h.ThreadID, Turns: h.Turns, Child: kids[0], Shared: h.Shared}

		next := newSup(t, w, func(c *Config) {
			shared(c)
			c.Adopted = []AdoptedChild{adopted}
		})
		for _, key := range []string{"a", "b", "c"} {
			r, err := next.Submit(context.Background(), key, "again")
			if err != nil || r.ThreadID != threads[key] || r.PID != kids[0].PID() {
				t.Fatalf("chat %s after the handover: %+v %v; want its thread in the adopted child", key, r, err)
			}
		}
		if st := next.Status(); st.Totals.Children != 1 || st.Totals.Live != 3 || w.spawnCount() != 1 {
			t.Fatalf("adopted pool: %d children, %d live, %d spawns; want the one child", st.Totals.Children, st.Totals.Live, w.spawnCount())
		}
		shutdown(t, next)

		// The same child handed to a pool of one child per chat is closed, not taken.
		other := newFakeWorld()
		lone := &pausableChild{fakeChild: mustSpawn(t, other)}
		one := newSup(t, other, func(c *Config) {
			c.Adopted = []AdoptedChild{{ChatKey: "a", ThreadID: threads["a"], Child: lone,
				Shared: []SharedThread{{ChatKey: "b", ThreadID: threads["b"]}}}}
		})
		if !lone.isDead() || one.Status().Totals.Live != 0 {
			t.Fatalf("a shared child handed to an unshared pool: dead %v, live %d", lone.isDead(), one.Status().Totals.Live)
		}
		shutdown(t, one)
		shutdown(t, s)
	})
}

func mustSpawn(t *testing.T, w *fakeWorld) *fakeChild {
	t.Helper()
	c, err := w.spawn(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	return c.(*fakeChild)
}
