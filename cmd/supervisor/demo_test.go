//go:build linux

package main

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/appserver/appservertest"
)

// demoEnv is the test's environment for a demo process, minus what would configure it behind the
// test's back, in helper-process mode (see TestMain).
func demoEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "CODEX_HOME" || k == "CODEX_BIN" || k == "PLATFORM_URL" || k == "GORACE" ||
			strings.HasPrefix(k, "CODEX_WARM_") || strings.HasPrefix(k, "MOLECULE_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, daemonEnv+"=1", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
}

// runningDemo is a `supervisor demo` process whose three chats are mid-turn.
type runningDemo struct {
	cmd      *exec.Cmd
	exited   chan error // its Wait's error, once; put back by whoever takes it
	stderr   *strings.Builder
	stateDir string
	// ps are its daemon and the daemon's codex children.
	ps []proc
}

// startBusyDemo starts `supervisor demo` with a mock model that holds every answer far longer
// than the test runs, and returns once its three chats are busy.
func startBusyDemo(t *testing.T) *runningDemo {
	t.Helper()
	bin := appservertest.CodexBin(t)
	cmd := exec.Command(os.Args[0], "demo", "--codex-bin", bin, "--model-latency", "10m")
	cmd.Env = demoEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	d := &runningDemo{cmd: cmd, exited: make(chan error, 1), stderr: &strings.Builder{}}
	cmd.Stderr = d.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		d.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-d.exited
	})

	var out []string
	deadline := time.After(waitTimeout)
	for d.stateDir == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("demo ended before naming its state dir: %q %s", out, d.stderr.String())
			}
			out = append(out, l)
			if v, ok := strings.CutPrefix(l, "state dir"); ok {
				d.stateDir = strings.TrimSpace(v)
			}
		case <-deadline:
			t.Fatalf("demo named no state dir within %s: %q", waitTimeout, out)
		}
	}
	go func() { // keep the pipe drained; Cleanup waits for the end
		for range lines {
		}
	}()

	var doc StatusDoc
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for doc.Snapshot.Totals.Busy < 3 {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("the demo's three chats were not busy within %s (status %+v)", waitTimeout, doc.Snapshot.Totals)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		doc, _ = fetchStatus(ctx, d.stateDir)
		cancel()
	}
	d.ps = []proc{procOf(t, doc.Daemon.PID)}
	for _, c := range doc.Snapshot.Children {
		if c.PID > 0 { // not a spare still spawning
			d.ps = append(d.ps, procOf(t, c.PID))
		}
	}
	return d
}

// wait returns the demo's exit error, failing the test if it does not end within waitTimeout.
func (d *runningDemo) wait(t *testing.T, after string) error {
	t.Helper()
	select {
	case err := <-d.exited:
		d.exited <- err // for Cleanup
		return err
	case <-time.After(waitTimeout):
		t.Fatalf("demo still running %s after %s", waitTimeout, after)
		return nil
	}
}

// Ctrl-C during `supervisor demo` (here: SIGINT once its three chats are mid-turn) stops its
// daemon and every codex child, removes its temporary directory, and exits non-zero.
func TestDemoInterruptLeavesNothing(t *testing.T) {
	t.Parallel()
	d := startBusyDemo(t)
	if err := d.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err := d.wait(t, "SIGINT")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() <= 0 {
		t.Errorf("demo exit after SIGINT: %v, want a non-zero exit code of its own", err)
	}
	waitGone(t, 10*time.Second, d.ps...)
	if _, err := os.Stat(d.stateDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the demo's state dir %s is still there (%v)", d.stateDir, err)
	}
	if !strings.Contains(d.stderr.String(), "interrupt") {
		t.Errorf("stderr does not say the demo was interrupted: %q", d.stderr.String())
	}
}

// A SIGKILLed `supervisor demo` cannot stop its daemon itself: the daemon has a parent-death
// signal, so it goes with the demo, and its codex children with it (theirs).
func TestDemoSIGKILLLeavesNoDaemon(t *testing.T) {
	t.Parallel()
	d := startBusyDemo(t)
	if err := d.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	d.wait(t, "SIGKILL")
	// Bounded only as a hang guard: the kernel signals the daemon when the demo dies.
	waitGone(t, waitTimeout, d.ps...)
	// What SIGKILL leaves is the demo's temporary directory only.
	_ = os.RemoveAll(filepath.Dir(d.stateDir))
}
