package childproc

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
)

// recordName is the record file's name in the tests' state directories.
const recordName = "children.json"

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func testLogger(t *testing.T) *zap.Logger {
	return zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
}

// startSleep starts `sleep` in its own process group, owned by the test: a process that is not
// a codex child of any daemon.
func startSleep(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "1000")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// A record whose pid and start time match a live process but whose executable cannot be
// confirmed (the record has none) is not acted on: that process may be anyone's. The sweep
// leaves it running and says why.
func TestSweepLeavesProcessWithUnverifiedExe(t *testing.T) {
	dir := t.TempDir()
	sleep := startSleep(t)
	st, err := ProcFS{}.Stat(sleep.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	rec := Record{PID: sleep.Process.Pid, StartTime: st.StartTime, ChatKey: "no-exe"}
	b, _ := json.Marshal(RecordFile{Children: []Record{rec}})
	if err := os.WriteFile(filepath.Join(dir, recordName), b, 0o600); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	got, err := Sweep(testCtx(t), filepath.Join(dir, recordName), 300*time.Millisecond, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := (ProcFS{}).Stat(sleep.Process.Pid); err != nil || st.Zombie() {
		t.Fatalf("the sweep killed pid %d although the record names no executable (state %q, %v)", sleep.Process.Pid, st.State, err)
	}
	if len(got) != 1 || got[0].Action != SweepUnverified || got[0].Reason == "" {
		t.Fatalf("sweep = %+v, want one %q with a reason", got, SweepUnverified)
	}
	entries := logs.FilterField(zap.String("action", SweepUnverified)).All()
	if len(entries) != 1 || entries[0].ContextMap()["reason"] == "" {
		t.Fatalf("sweep log = %+v, want the unverified record logged with its reason", logs.All())
	}
}

// plantedTree is a stand-in for a codex child that died with its daemon: a bash that led its own
// session (as appserver starts children) and left two processes behind, one in its process
// group (a background job) and one in a process group of its own within its session (how codex
// starts MCP servers). The test owns the leader; the two others are reparented when it dies.
type plantedTree struct {
	leader Record
	kids   []Record // pid and start time of the processes left behind
}

func plantTree(t *testing.T) plantedTree {
	t.Helper()
	cmd := exec.Command("bash", "-c", `sleep 777 & a=$!; set -m; sleep 778 & echo "$a $!"; wait`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var tree plantedTree
	var pids [2]int
	if _, err := fmt.Fscan(bufio.NewReader(out), &pids[0], &pids[1]); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("planted tree did not report its pids: %v", err)
	}
	for _, pid := range pids {
		st, err := ProcFS{}.Stat(pid)
		if err != nil {
			t.Fatalf("planted pid %d: %v", pid, err)
		}
		rec := Record{PID: pid, StartTime: st.StartTime}
		tree.kids = append(tree.kids, rec)
		t.Cleanup(func() {
			if RunsAsRecorded(rec) {
				_ = syscall.Kill(rec.PID, syscall.SIGKILL)
			}
		})
	}
	id := ReadIdentity(cmd.Process.Pid)
	tree.leader = RecordOf(id, "dead-leader")
	if id.StartTime == 0 || id.PGID != cmd.Process.Pid || id.SID != cmd.Process.Pid {
		t.Fatalf("planted leader identity %+v, want its own group and session", id)
	}
	// The leader dies as a codex child does with its daemon (parent-death SIGKILL); what it
	// started keeps running.
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	for _, k := range tree.kids {
		if !RunsAsRecorded(k) {
			t.Fatalf("planted pid %d died with its leader; nothing is left to sweep", k.PID)
		}
	}
	return tree
}

func writeChildren(t *testing.T, dir string, f RecordFile) {
	t.Helper()
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, recordName), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// Processes a dead child left in its process group or session are killed by the boot sweep
// although the child itself is gone; processes that started before the recorded child cannot be
// its descendants, so a group or session holding one is a stranger's (the id was reused) and is
// left alone.
func TestSweepKillsWhatADeadChildLeft(t *testing.T) {
	tree := plantTree(t)
	boot := ProcFS{}.BootID()
	if boot == "" {
		t.Fatal("no boot id in /proc")
	}
	dir := t.TempDir()

	// The same group and session, recorded for a child that started after its members: the ids
	// were reused, nothing may be touched.
	later := tree.leader
	later.StartTime = tree.kids[1].StartTime + 1
	writeChildren(t, dir, RecordFile{BootID: boot, Children: []Record{later}})
	got, err := Sweep(testCtx(t), filepath.Join(dir, recordName), 2*time.Second, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range tree.kids {
		if !RunsAsRecorded(k) {
			t.Fatalf("pid %d, older than the recorded child, was killed (sweep %+v)", k.PID, got)
		}
	}
	if len(got) != 1 || got[0].Remains != 0 || got[0].Reason == "" {
		t.Fatalf("sweep of a reused group = %+v, want nothing killed and a reason", got)
	}

	// A record of another boot: start times and ids mean nothing now.
	writeChildren(t, dir, RecordFile{BootID: "another-boot", Children: []Record{tree.leader}})
	if got, err = Sweep(testCtx(t), filepath.Join(dir, recordName), 2*time.Second, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	for _, k := range tree.kids {
		if !RunsAsRecorded(k) {
			t.Fatalf("pid %d was killed on a record of another boot (sweep %+v)", k.PID, got)
		}
	}

	writeChildren(t, dir, RecordFile{BootID: boot, Children: []Record{tree.leader}})
	if got, err = Sweep(testCtx(t), filepath.Join(dir, recordName), 2*time.Second, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	for _, k := range tree.kids {
		if RunsAsRecorded(k) {
			t.Errorf("pid %d, left by the dead child in its group or session, survived the sweep (%+v)", k.PID, got)
		}
	}
	if len(got) != 1 || got[0].Action != SweepGone || got[0].Remains != 2 {
		t.Fatalf("sweep = %+v, want the leader gone and 2 remains killed", got)
	}
}
