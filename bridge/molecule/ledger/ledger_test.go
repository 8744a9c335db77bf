package ledger

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"errors"

	"github.com/molecule-ai/codex-warm/internal/atomicfile"

	"github.com/molecule-ai/codex-warm/internal/atomicfile/atomicfiletest"
)

func openTestLedger(t *testing.T, dir string) *Ledger {
	t.Helper()
	l, err := Open(Config{Dir: dir, WorkspaceID: "ws-1", RecentIDs: 8})
	must(t, err)
	return l
}

// The cursor is the low-water mark over arrival order: it moves only over a finished prefix, and
// ids finished out of order are persisted so they are not answered twice.
func TestLedgerLowWaterMark(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openTestLedger(t, dir)
	for _, id := range []string{"z", "a", "m"} { // not sorted: order is arrival order
		if got := l.Admit(id, 0); got != AdmitNew {
			t.Fatalf("admit %s = %d", id, got)
		}
	}
	if got := l.Admit("a", 0); got != AdmitDuplicate {
		t.Fatalf("second admit of a = %d, want duplicate", got)
	}
	l.MarkDone("a")
	must(t, l.Sync())
	if c := l.Cursor(); c != "" {
		t.Fatalf("cursor %q moved past unfinished z", c)
	}
	st := readState(t, dir)
	if st.Cursor != "" || !slices.Contains(st.Done, "a") {
		t.Fatalf("state = %+v, want a remembered as done after the cursor", st)
	}
	l.MarkDone("z")
	if c := l.Cursor(); c != "a" {
		t.Fatalf("cursor = %q, want a", c)
	}
	l.MarkDone("m")
	must(t, l.Sync())
	if st := readState(t, dir); st.Cursor != "m" {
		t.Fatalf("cursor = %q, want m", st.Cursor)
	}
	if unacked, _ := l.Counts(); unacked != 0 {
		t.Fatalf("unacked = %d after everything finished", unacked)
	}
	if got := l.Admit("z", 0); got != AdmitDuplicate {
		t.Fatalf("finished id admitted again: %d", got)
	}
}

// Pending replies survive a reopen; the reopened ledger recognises finished ids and recovers the
// pending one when its row comes again.
func TestLedgerPersistsPendingAndDone(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openTestLedger(t, dir)
	l.Admit("r1", 5)
	l.Admit("r2", 6)
	l.Admit("r3", 7)
	p := Reply{ActivityID: "r1", ChatKey: "canvas:ws-1", Route: Route{"notify", "ws-1"}, Text: "answer", MessageID: "mid", AnsweredAt: time.Now()}
	l.SetPending(p)
	l.MarkDone("r2")
	must(t, l.Sync())

	l2 := openTestLedger(t, dir)
	restored := l2.TakeRestored()
	if len(restored) != 1 || restored[0].Text != "answer" || restored[0].MessageID != "mid" || restored[0].Route != p.Route {
		t.Fatalf("restored = %+v", restored)
	}
	if len(l2.TakeRestored()) != 0 {
		t.Fatalf("restored handed out twice")
	}
	if got := l2.Admit("r1", 5); got != AdmitRecovered {
		t.Fatalf("admit pending r1 = %d, want recovered", got)
	}
	if got := l2.Admit("r2", 6); got != AdmitDuplicate {
		t.Fatalf("admit done r2 = %d, want duplicate", got)
	}
	if got := l2.Admit("r3", 7); got != AdmitNew {
		t.Fatalf("admit r3 = %d, want new", got)
	}
	l2.MarkDone("r1")
	if c := l2.Cursor(); c != "r2" || l2.AckedSeq() != 6 {
		t.Fatalf("cursor = %q acked = %d, want r2 and 6", c, l2.AckedSeq())
	}
}

// A pending reply delivered before its row comes again is remembered as done.
func TestLedgerRecoveredBeforeRowSeen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openTestLedger(t, dir)
	l.Admit("x", 0)
	l.SetPending(Reply{ActivityID: "x", Route: Route{"notify", "ws-1"}, Text: "t"})
	must(t, l.Sync())
	l2 := openTestLedger(t, dir)
	l2.TakeRestored()
	l2.MarkDone("x")
	if got := l2.Admit("x", 0); got != AdmitDuplicate {
		t.Fatalf("admit = %d, want duplicate", got)
	}
	if c := l2.Cursor(); c != "x" {
		t.Fatalf("cursor = %q", c)
	}
}

// The done set is bounded: old ids behind the cursor are forgotten first, in memory and after a
// restart; the done log is rewritten before it grows past about twice the bound, and the state
// file lists only ids ahead of the cursor.
func TestLedgerBounded(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openTestLedger(t, dir) // ring of 8
	var ids []string
	for i := range 100 {
		id := "id-" + string(rune('A'+i%26)) + string(rune('a'+i/26))
		ids = append(ids, id)
		l.AdmitDone(id, 0)
		must(t, l.Sync())
		if logged, _, err := readDoneLog(filepath.Join(dir, DoneLogFileName)); err != nil || len(logged) > 2*8+64 {
			t.Fatalf("after %d ids the done log holds %d (%v)", i+1, len(logged), err)
		}
	}
	st := readState(t, dir)
	if len(st.Done) != 0 || st.Cursor != ids[99] {
		t.Fatalf("state file: done %v, cursor %q; want no ids ahead of the cursor, cursor %s", st.Done, st.Cursor, ids[99])
	}
	l2 := openTestLedger(t, dir)
	if got := l2.recent.List(); !slices.Equal(got, ids[92:]) {
		t.Fatalf("after a restart the ledger remembers %v, want the last 8 %v", got, ids[92:])
	}
	if unacked, _ := l.Counts(); unacked != 0 {
		t.Fatalf("unacked = %d", unacked)
	}
}

// A corrupt state file (or one of another workspace) is moved aside, never silently replaced.
func TestLedgerCorruptFileMovedAside(t *testing.T) {
	t.Parallel()
	for name, content := range map[string]string{
		"garbage":         "{not json",
		"wrong workspace": `{"version":1,"workspace_id":"other","cursor":"c"}`,
		"future version":  `{"version":99,"workspace_id":"ws-1"}`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, StateFileName)
			must(t, os.WriteFile(path, []byte(content), 0o600))
			l := openTestLedger(t, dir)
			if l.Cursor() != "" {
				t.Fatalf("cursor %q from an unusable file", l.Cursor())
			}
			entries, _ := os.ReadDir(dir)
			var aside []string
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), StateFileName+".corrupt-") {
					aside = append(aside, e.Name())
				}
			}
			if len(aside) != 1 {
				t.Fatalf("files = %v, want one moved-aside copy", entries)
			}
			b, _ := os.ReadFile(filepath.Join(dir, aside[0]))
			if string(b) != content {
				t.Fatalf("moved-aside content changed")
			}
		})
	}
}

// Back-pressure: waitRoom blocks while the window is full and wakes when it shrinks. The bubble
// makes "blocks" observable: synctest.Wait returns once the waiter is parked on the window, so
// the row is finished while it waits, not before it started.
func TestLedgerWaitRoom(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		l := openTestLedger(t, t.TempDir())
		l.Admit("a", 0)
		l.Admit("b", 0)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := l.WaitRoom(ctx, 2); err == nil {
			t.Fatal("waitRoom returned nil with a full window")
		}
		done := make(chan error, 1)
		go func() { done <- l.WaitRoom(context.Background(), 2) }()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("waitRoom returned %v with the window still full", err)
		default:
		}
		l.MarkDone("a")
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// Concurrent syncs share writes and leave a valid file (group commit).
func TestLedgerConcurrentSync(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openTestLedger(t, dir)
	errs := make(chan error, 20)
	for i := range 20 {
		go func() {
			id := string(rune('a' + i))
			l.Admit(id, 0)
			l.MarkDone(id)
			errs <- l.Sync()
		}()
	}
	for range 20 {
		must(t, <-errs)
	}
	if st := readState(t, dir); st.Cursor == "" {
		t.Fatalf("state = %+v", st)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 || entries[0].Name() != DoneLogFileName || entries[1].Name() != StateFileName {
		t.Fatalf("leftover files: %v, want the done log and the state file", entries)
	}
}

// A symbolic link at bridge-state.json is neither read through (a planted state would move the
// inbox position) nor replaced: opening the ledger fails naming the path, a link planted while
// the inbox runs makes the next write fail, and the file behind the link is untouched.
func TestLedgerRefusesSymlink(t *testing.T) {
	t.Parallel()
	t.Run("at open", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, StateFileName)
		v := atomicfiletest.PlantSymlink(t, path, []byte(`{"version": 1, "workspace_id": "ws-1", "cursor": "planted"}`+"\n"))
		l, err := Open(Config{Dir: dir, WorkspaceID: "ws-1", RecentIDs: 8})
		if !errors.Is(err, atomicfile.ErrSymlink) || !strings.Contains(err.Error(), path) {
			t.Fatalf("Open = %v (ledger %v), want an error naming %s as a symbolic link", err, l, path)
		}
		v.AssertUntouched(t)
	})
	t.Run("at write", func(t *testing.T) {
		dir := t.TempDir()
		l := openTestLedger(t, dir)
		l.Admit("a", 0)
		l.MarkDone("a")
		must(t, l.Sync())
		path := filepath.Join(dir, StateFileName)
		must(t, os.Remove(path))
		v := atomicfiletest.PlantSymlink(t, path, nil)
		l.Admit("b", 0)
		l.MarkDone("b")
		if err := l.Sync(); !errors.Is(err, atomicfile.ErrSymlink) || !strings.Contains(err.Error(), path) {
			t.Fatalf("sync = %v, want an error naming %s as a symbolic link", err, path)
		}
		v.AssertUntouched(t)
	})
}

// What the ledger keeps of a wait survives a restart and goes with the row; a state file of an
// older version (its "parked" ids) counts as told of the usage limit.
func TestLedgerWaitsSurviveRestart(t *testing.T) {
	t.Parallel()
	const modelUnreachable WaitReason = "model-unreachable"
	dir := t.TempDir()
	old := `{"version":1,"workspace_id":"ws-1","cursor":"","done":[],"pending":[],"parked":["a1"],"saved_at":"2026-01-01T00:00:00Z"}`
	must(t, os.WriteFile(filepath.Join(dir, StateFileName), []byte(old), 0o600))
	l := openTestLedger(t, dir)
	if w := l.WaitOf("a1"); !slices.Contains(w.Told, ReasonUsageLimit) {
		t.Fatalf("a1 from an older state file: %+v, want told of the usage limit", w)
	}
	l.Admit("a1", 0)
	l.Admit("a2", 0)
	l.SetWait(Wait{ActivityID: "a2", Reason: modelUnreachable, Told: []WaitReason{modelUnreachable}})
	must(t, l.Sync())
	if st := readState(t, dir); len(st.Parked) != 0 || len(st.Waits) != 2 {
		t.Fatalf("state written: parked %v waits %+v, want two waits and no parked list", st.Parked, st.Waits)
	}
	l.MarkDone("a1")
	must(t, l.Sync())
	l2 := openTestLedger(t, dir)
	if w := l2.WaitOf("a2"); w.Reason != modelUnreachable || !slices.Contains(w.Told, modelUnreachable) {
		t.Errorf("a2 after a restart: %+v", w)
	}
	if w := l2.WaitOf("a1"); len(w.Told) != 0 {
		t.Errorf("a finished row kept its wait: %+v", w)
	}
}

// PendingFiles lists the copies of every pending reply, restored or set in this run, and none of
// a reply once it is done.
func TestLedgerPendingFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openTestLedger(t, dir)
	l.SetPending(Reply{ActivityID: "a", Files: []SentFile{{Name: "x", Path: "/o/a/x"}, {Name: "y", Path: "/o/a/y"}}})
	must(t, l.Sync())
	l2 := openTestLedger(t, dir)
	l2.SetPending(Reply{ActivityID: "b", Files: []SentFile{{Name: "z", Path: "/o/b/z"}}})
	l2.SetPending(Reply{ActivityID: "c"})
	got := l2.PendingFiles()
	slices.Sort(got)
	if want := []string{"/o/a/x", "/o/a/y", "/o/b/z"}; !slices.Equal(got, want) {
		t.Errorf("pending files %q, want %q", got, want)
	}
	l2.MarkDone("a")
	if got := l2.PendingFiles(); !slices.Equal(got, []string{"/o/b/z"}) {
		t.Errorf("pending files %q after a is done, want b's alone", got)
	}
}
