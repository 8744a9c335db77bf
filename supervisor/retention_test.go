package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/molecule-ai/codex-warm/internal/retention"
	"github.com/molecule-ai/codex-warm/sessions"
)

// The fake child archives as codex does: the thread leaves the live ones (a resume fails) until
// it is unarchived.

func (c *fakeChild) ArchiveThread(_ context.Context, id string) error {
	w := c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	h, ok := w.threads[id]
	if !ok {
		return errors.New("-32600 no rollout found")
	}
	if w.archivedTh == nil {
		w.archivedTh = map[string][]string{}
	}
	w.archivedTh[id] = h
	delete(w.threads, id)
	return nil
}

func (c *fakeChild) UnarchiveThread(_ context.Context, id string) error {
	w := c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	h, ok := w.archivedTh[id]
	if !ok {
		return errors.New("-32600 no archived rollout found")
	}
	w.threads[id] = h
	delete(w.archivedTh, id)
	return nil
}

func (c *fakeChild) DeleteThread(_ context.Context, id string) error {
	w := c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	_, a := w.archivedTh[id]
	_, l := w.threads[id]
	if !a && !l {
		return errors.New("-32600 no rollout found")
	}
	delete(w.archivedTh, id)
	delete(w.threads, id)
	return nil
}

// retentionEnv is a supervisor with an archive log on a real state dir, inside a bubble.
func retentionEnv(t *testing.T, w *fakeWorld, lastTurns map[string]time.Time, live map[string]string, p retention.Policy, muts ...func(*Config)) (*Supervisor, *sessions.Store, *retention.Log) {
	t.Helper()
	dir := t.TempDir()
	chats := map[string]ChatUsage{}
	for k, at := range lastTurns {
		chats[k] = ChatUsage{Turns: 1, LastTurnAt: at}
	}
	b, _ := json.Marshal(map[string]any{"chats": chats})
	if err := os.WriteFile(filepath.Join(dir, UsageFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := sessions.Open(sessions.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for k, id := range live {
		if err := st.Set(k, id); err != nil {
			t.Fatal(err)
		}
	}
	l, err := retention.Open(retention.Config{Dir: dir, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	s := newSup(t, w, func(c *Config) {
		c.Store, c.StateDir, c.Retention, c.RetentionPolicy = st, dir, l, p
		c.RetentionEvery = time.Hour
		c.IdleTTL = 1000 * 24 * time.Hour
		c.TurnDeadline = 1000 * 24 * time.Hour
		c.MemorySampleInterval = -1 // no wake-up every few seconds over 40 fake days
		for _, m := range muts {
			m(c)
		}
	})
	return s, st, l
}

// The periodic sweep archives chats idle past IdleAfter as fake time passes: a warm idle child
// is retired first, a chat with no child is archived too, a chat whose turn runs is left until
// a sweep after its turn, a recent chat stays. A message to an archived chat unarchives its
// thread and continues its conversation. Shutdown waits for the sweep's goroutine.
func TestRetentionSweepArchivesIdleChats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		day := 24 * time.Hour
		w := newFakeWorld()
		w.threads["thread-c"] = []string{"old c"}
		w.threads["thread-d"] = []string{"old d"}
		w.nextThread = 100
		t0 := time.Now()
		s, st, l := retentionEnv(t, w,
			map[string]time.Time{"a": t0, "b": t0, "c": t0, "d": t0.Add(39 * day)},
			map[string]string{"c": "thread-c", "d": "thread-d"},
			retention.Policy{IdleAfter: 30 * day})
		defer shutdown(t, s)

		ra, err := s.Submit(context.Background(), "a", "hello")
		if err != nil {
			t.Fatal(err)
		}
		aChild := w.child(0)
		busy := submitAsync(context.Background(), s, "b", "block:g")
		synctest.Wait()

		time.Sleep(40 * day)
		synctest.Wait()
		for _, k := range []string{"a", "c"} {
			if _, ok := st.Get(k); ok {
				t.Errorf("chat %s is still live after 40 idle days", k)
			}
			if e, ok := l.Lookup(k); !ok || e.Event != retention.EventArchived {
				t.Errorf("chat %s: archive entry %+v %v", k, e, ok)
			}
		}
		if !aChild.isDead() {
			t.Error("the archived chat's warm child was not retired")
		}
		if _, ok := w.archivedTh[ra.ThreadID]; !ok {
			t.Errorf("chat a's thread %s was not archived", ra.ThreadID)
		}
		if _, ok := st.Get("b"); ok {
			// b had no thread recorded yet: its first turn still runs.
			t.Error("chat b recorded before its turn ended")
		}
		if id, ok := st.Get("d"); !ok || id != "thread-d" {
			t.Error("the recent chat was archived")
		}
		if busy.finished() {
			t.Fatal("the busy turn ended")
		}
		w.open("g")
		rb, err := busy.wait()
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if _, ok := st.Get("b"); ok {
			t.Error("chat b was not archived by the sweep after its turn")
		}
		if _, ok := w.archivedTh[rb.ThreadID]; !ok {
			t.Error("chat b's thread is not archived")
		}

		again, err := s.Submit(context.Background(), "a", "again")
		if err != nil {
			t.Fatal(err)
		}
		if again.ThreadID != ra.ThreadID || again.NewThread {
			t.Fatalf("the archived chat came back on %s (new %v), want %s", again.ThreadID, again.NewThread, ra.ThreadID)
		}
		if h := w.threads[ra.ThreadID]; !slices.Equal(h, []string{"hello", "again"}) {
			t.Fatalf("history %q, want the earlier turn kept", h)
		}
		if id, _ := st.Get("a"); id != ra.ThreadID {
			t.Fatal("the unarchived thread is not live again")
		}
		if c := l.Counts(); c.Archived != 3 || c.Unarchived != 1 {
			t.Errorf("counts %+v", c)
		}
	})
}

// A chat whose archived thread was deleted starts a new thread and is told once.
func TestRetentionDeletedChatToldOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		day := 24 * time.Hour
		w := newFakeWorld()
		w.threads["thread-c"] = []string{"old c"}
		w.nextThread = 100
		s, st, l := retentionEnv(t, w, map[string]time.Time{"c": time.Now()},
			map[string]string{"c": "thread-c"}, retention.Policy{IdleAfter: 30 * day, DeleteAfter: 60 * day})
		defer shutdown(t, s)
		time.Sleep(91 * day)
		synctest.Wait()
		if e, _ := l.Lookup("c"); e.Event != retention.EventDeleted {
			t.Fatalf("entry %+v, want deleted", e)
		}
		if _, ok := w.threads["thread-c"]; ok || w.archivedTh["thread-c"] != nil {
			t.Fatal("thread not deleted")
		}
		r, err := s.Submit(context.Background(), "c", "back")
		if err != nil {
			t.Fatal(err)
		}
		if !r.NewThread || r.ThreadID == "thread-c" || len(r.Notices) != 1 || r.Notices[0] != goneNotice("thread-c") {
			t.Fatalf("reply %+v, want a new thread and the notice once", r)
		}
		r2, err := s.Submit(context.Background(), "c", "more")
		if err != nil || r2.ThreadID != r.ThreadID || len(r2.Notices) != 0 {
			t.Fatalf("second reply %+v %v, want the same thread, no notice", r2, err)
		}
		if _, ok := l.Lookup("c"); ok {
			t.Fatal("the chat is still indexed as archived")
		}
		if id, _ := st.Get("c"); id != r.ThreadID {
			t.Fatal("new thread not recorded")
		}
	})
}

// The sweep's maintenance child takes a slot like any child: with MaxChildren 1 held by another
// chat's idle child, that child is evicted for it, and never are two children alive.
func TestRetentionMaintenanceChildTakesASlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		day := 24 * time.Hour
		w := newFakeWorld()
		w.threads["thread-c"] = []string{"old c"}
		w.nextThread = 100
		s, st, _ := retentionEnv(t, w, map[string]time.Time{"c": time.Now(), "x": time.Now().Add(1000 * day)},
			map[string]string{"c": "thread-c"}, retention.Policy{}, func(c *Config) { c.MaxChildren = 1 })
		defer shutdown(t, s)
		if _, err := s.Submit(context.Background(), "x", "hi"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(31 * day)
		res, err := s.ArchiveSweep(context.Background(), retention.Policy{IdleAfter: 30 * day}, false)
		if err != nil || len(res.Archived) != 1 || res.Archived[0].ChatKey != "c" {
			t.Fatalf("sweep %+v %v", res, err)
		}
		if _, ok := st.Get("c"); ok {
			t.Fatal("c still live")
		}
		if w.maxAlive != 1 {
			t.Fatalf("%d children alive at once, want 1 (MaxChildren)", w.maxAlive)
		}
		if !w.child(0).isDead() {
			t.Fatal("the idle child was not evicted for the maintenance child")
		}
	})
}
