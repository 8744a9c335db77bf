package ledger

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// A message costs a write that does not grow with the messages seen: once the ring of finished
// ids is full, the state file stays as small as with none, and the done log stays bounded.
func TestLedgerStateFileStaysSmall(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l, err := Open(Config{Dir: dir, WorkspaceID: "ws-1", RecentIDs: 64})
	must(t, err)
	var first, largest int64
	for i := range 300 {
		id := fmt.Sprintf("%08d-0000-4000-8000-000000000000", i)
		l.Admit(id, int64(i+1))
		l.SetPending(Reply{ActivityID: id, ChatKey: "canvas:ws-1", Route: Route{"notify", "ws-1"}, Text: "answer", MessageID: "m", AnsweredAt: time.Now()})
		must(t, l.Sync())
		l.MarkDone(id)
		must(t, l.Sync())
		fi, err := os.Stat(filepath.Join(dir, StateFileName))
		must(t, err)
		if i == 0 {
			first = fi.Size()
		}
		largest = max(largest, fi.Size())
		if logged, _, err := readDoneLog(filepath.Join(dir, DoneLogFileName)); err != nil || len(logged) > 2*64+64 {
			t.Fatalf("after %d messages the done log holds %d ids (%v)", i+1, len(logged), err)
		}
	}
	if largest > first+64 {
		t.Errorf("the state file grew from %d B after one message to %d B after 300", first, largest)
	}
	if got := len(openTestLedgerCap(t, dir, 64).recent.List()); got != 64 {
		t.Errorf("after a restart %d finished ids are remembered, want 64", got)
	}
}

func openTestLedgerCap(t *testing.T, dir string, n int) *Ledger {
	t.Helper()
	l, err := Open(Config{Dir: dir, WorkspaceID: "ws-1", RecentIDs: n})
	must(t, err)
	return l
}

// A kill after the finished id reached the done log and before the state file moved the cursor
// past it: the next run knows the id is finished, drops its pending reply (it was delivered) and
// does not answer its row again.
func TestLedgerKilledBetweenDoneLogAndState(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openTestLedger(t, dir)
	l.Admit("r1", 1)
	l.SetPending(Reply{ActivityID: "r1", ChatKey: "canvas:ws-1", Route: Route{"notify", "ws-1"}, Text: "answer", MessageID: "m", AnsweredAt: time.Now()})
	must(t, l.Sync())
	// What sync does first after the delivery, and then the kill.
	must(t, appendDoneLog(filepath.Join(dir, DoneLogFileName), []string{"r1"}))
	if st := readState(t, dir); len(st.Pending) != 1 || st.Cursor != "" {
		t.Fatalf("state file %+v, want r1 still pending", st)
	}
	l2 := openTestLedger(t, dir)
	if r := l2.TakeRestored(); len(r) != 0 {
		t.Errorf("restored %v: a delivered reply would be sent again", r)
	}
	if got := l2.Admit("r1", 1); got != AdmitDuplicate {
		t.Errorf("r1 admitted as %d after the restart, want a duplicate", got)
	}
}

// A kill during an append cuts the done log's last line: the ids before it are kept, the cut one
// is not (its write had not completed, and the state file still lists it as pending or ahead of
// the cursor), and the log is whole again after the start.
func TestLedgerDoneLogCutMidLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, DoneLogFileName)
	must(t, os.WriteFile(path, []byte(`"a"`+"\n"+`"b"`+"\n"+`"c`), 0o600))
	l := openTestLedger(t, dir)
	if got := l.recent.List(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("remembered %v, want a and b", got)
	}
	l.AdmitDone("d", 0)
	must(t, l.Sync())
	if got, cut, err := readDoneLog(path); err != nil || cut || !slices.Equal(got, []string{"a", "b", "d"}) {
		t.Errorf("done log %v (cut %v, %v), want a, b, d on whole lines", got, cut, err)
	}
}

// A state file written before the done log existed lists every finished id in "done": they are
// read as before, moved to the done log at start, and still known after the next restart.
func TestLedgerOldStateFileDoneIDs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, StateFileName), []byte(`{"version":1,"workspace_id":"ws-1","cursor":"c","done":["a","b","c"],"pending":[]}`), 0o600))
	l := openTestLedger(t, dir)
	l.AdmitDone("d", 0)
	must(t, l.Sync())
	if st := readState(t, dir); len(st.Done) != 0 || st.Cursor != "d" {
		t.Fatalf("state file %+v, want no done ids in it and cursor d", st)
	}
	l2 := openTestLedger(t, dir)
	for _, id := range []string{"a", "b", "c", "d"} {
		if !l2.recent.Has(id) {
			t.Errorf("%s forgotten after the move to the done log", id)
		}
	}
}
