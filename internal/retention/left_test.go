package retention

import (
	"context"
	"strings"
	"testing"
	"time"
)

const day = 24 * time.Hour

// leave makes chat key leave its thread as /new does (sessions.Store.Archive's line) and go on
// with next.
func (e *env) leave(t *testing.T, key, next string) string {
	t.Helper()
	old, err := e.store.Archive(key, "/new")
	if err != nil || old == "" {
		t.Fatalf("archive %q: %q %v", key, old, err)
	}
	if err := e.store.Set(key, next); err != nil {
		t.Fatal(err)
	}
	return old
}

func leftOf(p []Candidate) map[string]string {
	m := map[string]string{}
	for _, c := range p {
		if c.Left {
			m[c.ThreadID] = c.ChatKey
		}
	}
	return m
}

// The threads a chat leaves with /new are archived IdleAfter after it left them and deleted
// DeleteAfter after that, like an idle chat's; the chat's own live thread is never touched, and
// the chat's entry (what a returning chat unarchives) stays its own thread's.
func TestLeftThreadsArchivedAndDeleted(t *testing.T) {
	e := newEnv(t)
	e.now = time.Now().UTC() // sessions.Store.Archive stamps its lines with the real clock
	left := e.now
	codex := &fakeCodex{where: map[string]string{"t1": "sessions", "t2": "sessions", "t3": "sessions"}}
	if err := e.store.Set("k", "t1"); err != nil {
		t.Fatal(err)
	}
	e.leave(t, "k", "t2")
	e.reopen(t) // t1 is read back from the file
	e.log.Left("k", e.leave(t, "k", "t3"), left)

	lastTurn := func(string) (time.Time, bool) { return e.now, true } // the chat itself is busy
	p := Policy{IdleAfter: 30 * day, DeleteAfter: 90 * day}
	e.now = left.Add(29 * day)
	if plan := e.log.Plan(p, e.store.Snapshot(), lastTurn); len(plan.Archive)+len(plan.Delete) != 0 {
		t.Fatalf("planned before 30 days: %+v", plan)
	}
	e.now = left.Add(31 * day)
	plan := e.log.Plan(p, e.store.Snapshot(), lastTurn)
	if got := leftOf(plan.Archive); len(plan.Archive) != 2 || got["t1"] != "k" || got["t2"] != "k" {
		t.Fatalf("plan after 31 days: %+v", plan)
	}
	for _, c := range plan.Archive {
		if err := e.log.ArchiveLeft(context.Background(), codex, c.ThreadID, "left"); err != nil {
			t.Fatal(err)
		}
	}
	if codex.where["t1"] != "archived_sessions" || codex.where["t2"] != "archived_sessions" || codex.where["t3"] != "sessions" {
		t.Fatalf("rollouts %v", codex.where)
	}
	if id, _ := e.store.Get("k"); id != "t3" {
		t.Fatalf("the chat's live thread is %q", id)
	}
	if _, ok := e.log.Lookup("k"); ok {
		t.Fatal("the chat is indexed as archived")
	}
	// The chat goes idle too: its own thread is archived as a chat's, and what it comes back to
	// is that thread, never one it left.
	if err := e.log.Archive(context.Background(), codex, "k", "t3", "idle"); err != nil {
		t.Fatal(err)
	}
	if c := e.log.Counts(); c.Archived != 3 { // since Open: two left threads and the chat's
		t.Fatalf("counts %+v", c)
	}
	e.reopen(t)
	if en, ok := e.log.Lookup("k"); !ok || en.ThreadID != "t3" {
		t.Fatalf("chat entry %+v %v, want t3", en, ok)
	}
	if c := e.log.Counts(); c.Left != 2 || c.Current != 1 {
		t.Fatalf("counts %+v", c)
	}

	e.now = e.now.Add(89 * day)
	if plan := e.log.Plan(p, nil, lastTurn); len(leftOf(plan.Delete)) != 0 {
		t.Fatalf("deleted before 90 days: %+v", plan)
	}
	e.now = e.now.Add(2 * day)
	plan = e.log.Plan(p, nil, lastTurn)
	if got := leftOf(plan.Delete); len(got) != 2 {
		t.Fatalf("plan after 90 days: %+v", plan)
	}
	for _, c := range plan.Delete {
		if !c.Left {
			continue
		}
		if err := e.log.DeleteLeft(context.Background(), codex, c.ThreadID); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := codex.where["t1"]; ok {
		t.Fatalf("t1 not deleted: %v", codex.where)
	}
	if _, ok := codex.where["t2"]; ok {
		t.Fatalf("t2 not deleted: %v", codex.where)
	}
	if codex.where["t3"] != "archived_sessions" {
		t.Fatalf("the chat's own thread: %v", codex.where)
	}
	if c := e.log.Counts(); c.Left != 0 || c.Deleted != 2 {
		t.Fatalf("counts %+v", c)
	}
	e.reopen(t)
	if lt := e.log.LeftThreads(); len(lt) != 0 {
		t.Fatalf("deleted left threads are still indexed: %+v", lt)
	}
	if en, _ := e.log.Lookup("k"); en.ThreadID != "t3" || en.Event != EventArchived {
		t.Fatalf("chat entry %+v", en)
	}
}

// A kill between the steps of archiving or deleting a left thread: the next sweep plans it
// again and finishes it, whether or not codex had done its part.
func TestLeftThreadKilledBetweenSteps(t *testing.T) {
	for _, moved := range []bool{false, true} {
		e := newEnv(t)
		e.now = time.Now().UTC()
		codex := &fakeCodex{where: map[string]string{"t1": "sessions", "t2": "sessions"}}
		if err := e.store.Set("k", "t1"); err != nil {
			t.Fatal(err)
		}
		e.leave(t, "k", "t2")
		e.reopen(t)
		if err := e.log.append(Line{ChatKey: "k", ThreadID: "t1", Event: EventArchiveIntent, Left: true}); err != nil {
			t.Fatal(err)
		}
		if moved {
			codex.where["t1"] = "archived_sessions"
		}
		e.reopen(t) // the kill
		plan := e.log.Plan(Policy{}, e.store.Snapshot(), nil)
		if got := leftOf(plan.Archive); len(plan.Archive) != 1 || got["t1"] != "k" {
			t.Fatalf("moved=%v: the cut archive is not planned again: %+v", moved, plan)
		}
		if err := e.log.ArchiveLeft(context.Background(), codex, "t1", "left"); err != nil {
			t.Fatal(err)
		}
		if codex.where["t1"] != "archived_sessions" || codex.where["t2"] != "sessions" {
			t.Fatalf("rollouts %v", codex.where)
		}
		if got := strings.Count(readFile(t, e.log.Path()), `"event":"archived"`); got != 1 {
			t.Fatalf("%d archived lines, want 1", got)
		}

		if err := e.log.append(Line{ChatKey: "k", ThreadID: "t1", Event: EventDeleteIntent, Left: true}); err != nil {
			t.Fatal(err)
		}
		if moved {
			delete(codex.where, "t1")
		}
		e.reopen(t)
		plan = e.log.Plan(Policy{}, e.store.Snapshot(), nil)
		if got := leftOf(plan.Delete); len(plan.Delete) != 1 || got["t1"] != "k" {
			t.Fatalf("moved=%v: the cut delete is not planned again: %+v", moved, plan)
		}
		if err := e.log.DeleteLeft(context.Background(), codex, "t1"); err != nil {
			t.Fatal(err)
		}
		if _, ok := codex.where["t1"]; ok || codex.where["t2"] != "sessions" {
			t.Fatalf("rollouts %v", codex.where)
		}
		if id, _ := e.store.Get("k"); id != "t2" {
			t.Fatalf("the chat's live thread is %q", id)
		}
		e.reopen(t)
		if lt := e.log.LeftThreads(); len(lt) != 0 {
			t.Fatalf("left threads %+v", lt)
		}
	}
}

// A first refusal leaves the intent for the next sweep; a refused retry (the thread codex
// could not resume is not in CODEX_HOME at all) is recorded archived, so it is not retried for
// ever, and its delete ends the same way.
func TestLeftThreadCodexDoesNotHave(t *testing.T) {
	e := newEnv(t)
	e.now = time.Now().UTC()
	codex := &fakeCodex{where: map[string]string{}}
	if err := e.store.Set("k", "gone"); err != nil {
		t.Fatal(err)
	}
	e.leave(t, "k", "t2")
	e.reopen(t)
	if err := e.log.ArchiveLeft(context.Background(), codex, "gone", "left"); err == nil {
		t.Fatal("no error on the first refusal")
	}
	if err := e.log.ArchiveLeft(context.Background(), codex, "gone", "left"); err != nil {
		t.Fatal(err)
	}
	if err := e.log.DeleteLeft(context.Background(), codex, "gone"); err == nil {
		t.Fatal("no error on the first refused delete")
	}
	if err := e.log.DeleteLeft(context.Background(), codex, "gone"); err != nil {
		t.Fatal(err)
	}
	if lt := e.log.LeftThreads(); len(lt) != 0 {
		t.Fatalf("left threads %+v", lt)
	}
}

// A kill between sessions.Store.Archive's line and its sessions.json write leaves the chat on
// the thread: it is the chat's live thread, never archived as a left one.
func TestLeftThreadStillLiveIsNotTouched(t *testing.T) {
	e := newEnv(t)
	codex := &fakeCodex{where: map[string]string{"t1": "sessions"}}
	if err := e.store.Set("k", "t1"); err != nil {
		t.Fatal(err)
	}
	if err := e.log.append(Line{ChatKey: "k", ThreadID: "t1", Reason: "/new"}); err != nil {
		t.Fatal(err)
	}
	e.reopen(t)
	if lt := e.log.LeftThreads(); len(lt) != 0 {
		t.Fatalf("a live thread is indexed as left: %+v", lt)
	}
	// The same at run time (the sessions.json write failed after the line): Plan skips it and
	// ArchiveLeft refuses.
	e.log.Left("k", "t1", e.now)
	e.now = e.now.Add(40 * day)
	plan := e.log.Plan(Policy{IdleAfter: 30 * day}, e.store.Snapshot(), func(string) (time.Time, bool) { return e.now, true })
	if len(plan.Archive) != 0 {
		t.Fatalf("plan %+v", plan)
	}
	if err := e.log.ArchiveLeft(context.Background(), codex, "t1", "left"); err == nil {
		t.Fatal("archived the chat's live thread")
	}
	if codex.where["t1"] != "sessions" {
		t.Fatalf("rollout %v", codex.where)
	}
}
