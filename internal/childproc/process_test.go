package childproc

import (
	"bufio"
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// patientGrace is the CloseGrace of a test whose child is meant to obey the first rung it meets:
// the rung ends on the child's exit, so only a child that ignores it waits this long.
const patientGrace = time.Minute

// startSh starts /bin/sh -c script with the given CloseGrace and stops it at the end of the test.
func startSh(t *testing.T, script string, grace time.Duration) *Process {
	t.Helper()
	p, err := StartProcess(ProcessConfig{Bin: "/bin/sh", Args: []string{"-c", script}, CloseGrace: grace})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = p.Stop(context.Background()) })
	return p
}

// readLine reads the child's next line of stdout: the event a script announces itself with.
func readLine(t *testing.T, p *Process) string {
	t.Helper()
	line, err := bufio.NewReader(p.Stdout()).ReadString('\n')
	if err != nil {
		t.Fatalf("read the child's stdout: %v", err)
	}
	return strings.TrimSpace(line)
}

// TestProcessStopLadder stops a child that obeys stdin EOF, one that ignores it and obeys
// SIGTERM, and one that ignores both. Each script says "ready" once it ignores what it should,
// so no rung arrives before the child is set up. A child meant to obey a rung gets a patient
// grace; the other two wait the grace out, once or twice, so theirs is short, yet long enough
// for the SIGTERM child to die on a loaded machine.
func TestProcessStopLadder(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script string
		grace  time.Duration
		want   StopHow
		signal syscall.Signal // 0: a clean exit
	}{
		{"stdin EOF", "echo ready; cat >/dev/null; echo bye >&2", patientGrace, StoppedByStdinEOF, 0},
		{"SIGTERM", "exec 0</dev/null; echo ready; while :; do sleep 0.05; done", time.Second, StoppedBySIGTERM, syscall.SIGTERM},
		{"SIGKILL", "trap '' TERM; exec 0</dev/null; echo ready; while :; do sleep 0.05; done", 300 * time.Millisecond,
			StoppedBySIGKILL, syscall.SIGKILL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startSh(t, tc.script, tc.grace)
			if line := readLine(t, p); line != "ready" {
				t.Fatalf("child said %q, want ready", line)
			}
			how, err := p.Stop(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if how != tc.want {
				t.Errorf("stopped %q, want %q", how, tc.want)
			}
			st := p.ProcessState()
			if st == nil {
				t.Fatal("no process state after Stop")
			}
			ws, _ := st.Sys().(syscall.WaitStatus)
			switch {
			case tc.signal == 0 && !st.Success():
				t.Errorf("status %v, want success", st)
			case tc.signal != 0 && (!ws.Signaled() || ws.Signal() != tc.signal):
				t.Errorf("status %v, want killed by %v", st, tc.signal)
			}
			if tc.signal == 0 && !strings.Contains(p.Tail().String(), "bye") {
				t.Errorf("stderr tail %q lacks the child's last words", p.Tail().String())
			}
			if again, err := p.Stop(context.Background()); again != how || err != nil {
				t.Errorf("second Stop: %v, %v; want %v, nil", again, err, how)
			}
		})
	}
}

func TestProcessStopWithDoneContextKillsAtOnce(t *testing.T) {
	p, err := StartProcess(ProcessConfig{Bin: "/bin/sh", Args: []string{"-c", "trap '' TERM; exec 0</dev/null; while :; do sleep 0.05; done"},
		CloseGrace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	how, err := p.Stop(ctx)
	if err != nil || how != StoppedBySIGKILL {
		t.Errorf("Stop with a done context: %v, %v; want %v", how, err, StoppedBySIGKILL)
	}
}

// An exited leader's group is SIGKILLed before the leader is reaped: a tool it left behind does
// not outlive it.
func TestProcessExitKillsGroupRemains(t *testing.T) {
	p := startSh(t, "sleep 1000 >/dev/null 2>&1 </dev/null & echo $!; cat >/dev/null", patientGrace)
	orphan, err := strconv.Atoi(readLine(t, p))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(orphan, syscall.SIGKILL) })
	if how, err := p.Stop(context.Background()); err != nil || how != StoppedByStdinEOF {
		t.Fatalf("Stop: %v, %v", how, err)
	}
	// Stop returns after the reap, and the reap after the sweep saw the group dead (or gave up
	// after the grace, which a minute makes a failure of the sweep, not of the machine's load).
	if st, err := (ProcFS{}).Stat(orphan); err == nil && !st.Zombie() {
		t.Errorf("pid %d left in the group still runs after the leader was reaped", orphan)
	}
}

// A child that crashes while the daemon runs takes its whole session with it, not only its
// process group: an MCP server or a tool job that a shell put in a process group of its own
// (set -m) is killed before the leader is reaped, so nothing of it waits for the next boot
// sweep. By the time Exited is closed the remains are dead (a zombie at most, waiting for its
// new parent).
func TestProcessCrashKillsSessionRemains(t *testing.T) {
	p, err := StartProcess(ProcessConfig{Bin: "/bin/bash", Args: []string{"-c",
		"set -m; sleep 1000 >/dev/null 2>&1 </dev/null & echo $!; cat >/dev/null"}, CloseGrace: patientGrace})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = p.Stop(context.Background()) })
	line, err := bufio.NewReader(p.Stdout()).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	job, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(job, syscall.SIGKILL) })
	st, err := (ProcFS{}).Stat(job)
	if err != nil || st.PGRP == p.PID() || st.Session != p.PID() {
		t.Fatalf("job %d: %+v, %v; want it in the child's session, in a group of its own", job, st, err)
	}

	if err := syscall.Kill(p.PID(), syscall.SIGKILL); err != nil { // the crash
		t.Fatal(err)
	}
	<-p.Exited()
	if st, err := (ProcFS{}).Stat(job); err == nil && !st.Zombie() {
		t.Errorf("job %d of the crashed child's session still runs after the child was reaped", job)
	}
}
