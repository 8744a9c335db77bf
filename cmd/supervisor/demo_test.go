//go:build linux

package main

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
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

// Ctrl-C during `supervisor demo` (here: SIGINT once its three chats are mid-turn) stops its
// daemon and every codex child, removes its temporary directory, and exits non-zero.
func TestDemoInterruptLeavesNothing(t *testing.T) {
	t.Parallel()
	bin := appservertest.CodexBin(t)
	// The mock model holds every answer far longer than the test runs: the turns are still
	// running when the signal comes.
	cmd := exec.Command(os.Args[0], "demo", "--codex-bin", bin, "--model-latency", "10m")
	cmd.Env = demoEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	})

	var out []string
	stateDir := ""
	deadline := time.After(waitTimeout)
	for stateDir == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("demo ended before naming its state dir: %q %s", out, stderr.String())
			}
			out = append(out, l)
			if v, ok := strings.CutPrefix(l, "state dir"); ok {
				stateDir = strings.TrimSpace(v)
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
		doc, _ = fetchStatus(ctx, stateDir)
		cancel()
	}
	ps := []proc{procOf(t, doc.Daemon.PID)}
	for _, c := range doc.Snapshot.Children {
		if c.PID > 0 { // not a spare still spawning
			ps = append(ps, procOf(t, c.PID))
		}
	}

	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-exited:
		exited <- err // for Cleanup
	case <-time.After(waitTimeout):
		t.Fatalf("demo still running %s after SIGINT", waitTimeout)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() <= 0 {
		t.Errorf("demo exit after SIGINT: %v, want a non-zero exit code of its own", err)
	}
	waitGone(t, 10*time.Second, ps...)
	if _, err := os.Stat(stateDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the demo's state dir %s is still there (%v)", stateDir, err)
	}
	if !strings.Contains(stderr.String(), "interrupt") {
		t.Errorf("stderr does not say the demo was interrupted: %q", stderr.String())
	}
}
