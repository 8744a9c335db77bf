package retention

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/sessions"
)

// fakeCodex keeps the folder each thread's rollout is in, as codex 0.171 does.
type fakeCodex struct {
	where map[string]string // thread → "sessions" | "archived_sessions"; absent: deleted
	fail  error
}

func (f *fakeCodex) ArchiveThread(_ context.Context, id string) error {
	if f.fail != nil {
		return f.fail
	}
	if f.where[id] != "sessions" {
		return errors.New("no rollout found")
	}
	f.where[id] = "archived_sessions"
	return nil
}

func (f *fakeCodex) UnarchiveThread(_ context.Context, id string) error {
	if f.where[id] != "archived_sessions" {
		return errors.New("no archived rollout found")
	}
	f.where[id] = "sessions"
	return nil
}

func (f *fakeCodex) DeleteThread(_ context.Context, id string) error {
	if _, ok := f.where[id]; !ok {
		return errors.New("no rollout found")
	}
	delete(f.where, id)
	return nil
}

type env struct {
	dir   string
	now   time.Time
	store *sessions.Store
	log   *Log
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{dir: t.TempDir(), now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	e.reopen(t)
	return e
}

// reopen opens the state dir again, as a daemon started after a kill would.
func (e *env) reopen(t *testing.T) {
	t.Helper()
	st, err := sessions.Open(sessions.Config{Dir: e.dir})
	if err != nil {
		t.Fatal(err)
	}
	l, err := Open(Config{Dir: e.dir, Store: st, Now: func() time.Time { return e.now }})
	if err != nil {
		t.Fatal(err)
	}
	e.store, e.log = st, l
}

func TestPlanArchivesIdleChatsAndDeletesOldArchives(t *testing.T) {
	e := newEnv(t)
	day := 24 * time.Hour
	last := map[string]time.Time{"a": e.now.Add(-31 * day), "b": e.now.Add(-29 * day)}
	lastTurn := func(k string) (time.Time, bool) { at, ok := last[k]; return at, ok }
	live := map[string]string{"a": "ta", "b": "tb", "c": "tc"} // c: no turn known, left alone
	p := Policy{IdleAfter: 30 * day, DeleteAfter: 90 * day}
	plan := e.log.Plan(p, live, lastTurn)
	if len(plan.Archive) != 1 || plan.Archive[0].ChatKey != "a" || len(plan.Delete) != 0 {
		t.Fatalf("plan %+v", plan)
	}
	codex := &fakeCodex{where: map[string]string{"ta": "sessions"}}
	if err := e.store.Set("a", "ta"); err != nil {
		t.Fatal(err)
	}
	if err := e.log.Archive(context.Background(), codex, "a", "ta", "idle"); err != nil {
		t.Fatal(err)
	}
	e.now = e.now.Add(89 * day)
	if plan := e.log.Plan(p, nil, lastTurn); len(plan.Delete) != 0 {
		t.Fatalf("deleted before 90 days: %+v", plan)
	}
	e.now = e.now.Add(day)
	plan = e.log.Plan(p, nil, lastTurn)
	if len(plan.Delete) != 1 || plan.Delete[0].ThreadID != "ta" {
		t.Fatalf("plan after 90 days: %+v", plan)
	}
	if err := e.log.Delete(context.Background(), codex, "a"); err != nil {
		t.Fatal(err)
	}
	if _, ok := codex.where["ta"]; ok {
		t.Fatal("thread not deleted")
	}
	if en, _ := e.log.Lookup("a"); en.Event != EventDeleted {
		t.Fatalf("entry %+v", en)
	}
	if c := e.log.Counts(); c.Archived != 1 || c.Deleted != 1 {
		t.Fatalf("counts %+v", c)
	}
	if plan := e.log.Plan(Policy{}, nil, lastTurn); len(plan.Archive)+len(plan.Delete) != 0 {
		t.Fatalf("a zero policy planned %+v", plan)
	}
}

// A kill between any two steps of Archive loses nothing: after Open the chat is out of the live
// state and recorded archived, and coming back (unarchive, then resume) finds its rollout.
func TestArchiveKilledBetweenSteps(t *testing.T) {
	steps := []string{"after intent", "after thread/archive", "after dropping the key"}
	for n, name := range steps {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			codex := &fakeCodex{where: map[string]string{"t1": "sessions"}}
			if err := e.store.Set("k", "t1"); err != nil {
				t.Fatal(err)
			}
			if err := e.log.intend("k", "t1"); err != nil {
				t.Fatal(err)
			}
			if n >= 1 {
				if err := codex.ArchiveThread(context.Background(), "t1"); err != nil {
					t.Fatal(err)
				}
			}
			if n >= 2 {
				if err := e.store.Delete("k"); err != nil {
					t.Fatal(err)
				}
			}
			e.reopen(t) // the kill: nothing but the files carries over
			if _, ok := e.store.Get("k"); ok {
				t.Fatal("the chat is still in sessions.json after recovery")
			}
			en, ok := e.log.Lookup("k")
			if !ok || en.Event != EventArchived || en.ThreadID != "t1" {
				t.Fatalf("entry %+v %v, want archived t1", en, ok)
			}
			// Coming back: unarchive (fails harmlessly when the rollout never moved), resume.
			_ = codex.UnarchiveThread(context.Background(), "t1")
			if codex.where["t1"] != "sessions" {
				t.Fatalf("rollout in %q after coming back", codex.where["t1"])
			}
			e.reopen(t)
			if en, _ := e.log.Lookup("k"); en.Event != EventArchived {
				t.Fatalf("a second start changed the entry: %+v", en)
			}
			if got := strings.Count(readFile(t, e.log.Path()), `"event":"archived"`); got != 1 {
				t.Fatalf("%d archived lines, want 1", got)
			}
		})
	}
}

// A kill after the delete intent: the next sweep deletes again and records it, whether or not
// the first call had deleted the rollout.
func TestDeleteKilledAfterIntent(t *testing.T) {
	for _, deleted := range []bool{false, true} {
		e := newEnv(t)
		codex := &fakeCodex{where: map[string]string{"t1": "sessions"}}
		if err := e.store.Set("k", "t1"); err != nil {
			t.Fatal(err)
		}
		if err := e.log.Archive(context.Background(), codex, "k", "t1", "idle"); err != nil {
			t.Fatal(err)
		}
		if err := e.log.append(Line{ChatKey: "k", ThreadID: "t1", Event: EventDeleteIntent}); err != nil {
			t.Fatal(err)
		}
		if deleted {
			delete(codex.where, "t1")
		}
		e.reopen(t)
		plan := e.log.Plan(Policy{}, nil, nil)
		if len(plan.Delete) != 1 {
			t.Fatalf("deleted=%v: the cut delete is not planned again: %+v", deleted, plan)
		}
		if err := e.log.Delete(context.Background(), codex, "k"); err != nil {
			t.Fatal(err)
		}
		if _, ok := codex.where["t1"]; ok {
			t.Fatal("rollout survived")
		}
		if en, _ := e.log.Lookup("k"); en.Event != EventDeleted {
			t.Fatalf("entry %+v", en)
		}
	}
}

// When codex refuses to archive, the chat stays live and nothing is left half done.
func TestArchiveRefusedKeepsTheChat(t *testing.T) {
	e := newEnv(t)
	codex := &fakeCodex{where: map[string]string{"t1": "sessions"}, fail: errors.New("active writer")}
	if err := e.store.Set("k", "t1"); err != nil {
		t.Fatal(err)
	}
	if err := e.log.Archive(context.Background(), codex, "k", "t1", "idle"); err == nil {
		t.Fatal("no error")
	}
	e.reopen(t)
	if id, ok := e.store.Get("k"); !ok || id != "t1" {
		t.Fatal("the chat left the live state")
	}
	if _, ok := e.log.Lookup("k"); ok {
		t.Fatal("the chat is indexed as archived")
	}
}

// A line cut short by a kill is dropped and cut off, and the next line starts on its own.
func TestCutLine(t *testing.T) {
	e := newEnv(t)
	if err := e.store.Set("k", "t1"); err != nil {
		t.Fatal(err)
	}
	if err := e.log.Archive(context.Background(), &fakeCodex{where: map[string]string{"t1": "sessions"}}, "k", "t1", "idle"); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(e.log.Path(), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"chat_key":"k","thread_id":"t1","ev`)
	f.Close()
	e.reopen(t)
	if err := e.log.Unarchived("k", "t1"); err != nil {
		t.Fatal(err)
	}
	e.reopen(t)
	if _, ok := e.log.Lookup("k"); ok {
		t.Fatal("the unarchived line after the cut one was not read")
	}
}

// Lines sessions.Store.Archive writes (/new) are not archived chats: they are left threads.
func TestNewLinesIgnored(t *testing.T) {
	e := newEnv(t)
	if err := e.store.Set("k", "t1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Archive("k", "/new"); err != nil {
		t.Fatal(err)
	}
	e.reopen(t)
	if _, ok := e.log.Lookup("k"); ok {
		t.Fatal("a /new line made the chat archived")
	}
	if lt := e.log.LeftThreads(); len(lt) != 1 || lt[0].ThreadID != "t1" || lt[0].ChatKey != "k" || lt[0].Event != EventLeft {
		t.Fatalf("left threads %+v", lt)
	}
	if _, err := os.Stat(filepath.Join(e.dir, sessions.ArchiveFileName)); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
