package harness

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/internal/exectest"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// fakeSupervisor is a stand-in for the supervisor binary: `run --state-dir D` publishes a status
// with its pid and then runs until SIGTERM (exit 0) or SIGKILL; `status --json --state-dir D`
// prints that status, or fails like a daemon that is not up yet.
const fakeSupervisor = `#!/bin/sh
case "$1" in
run)
	trap 'exit 0' TERM
	printf '{"daemon":{"pid":%d,"listen":"127.0.0.1:1"}}' $$ > "$3/status.tmp"
	mv "$3/status.tmp" "$3/status.json"
	while :; do sleep 0.05; done
	;;
status)
	cat "$4/status.json" 2>/dev/null || { echo "no daemon" >&2; exit 3; }
	;;
fail)
	exit 7
	;;
esac
`

func writeFakeSupervisor(t *testing.T) (bin, stateDir string) {
	t.Helper()
	dir := t.TempDir()
	bin = filepath.Join(dir, "supervisor")
	if err := exectest.WriteExecutable(bin, []byte(fakeSupervisor), 0o700); err != nil {
		t.Fatal(err)
	}
	stateDir = filepath.Join(dir, "state")
	if err := os.Mkdir(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	return bin, stateDir
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func startFake(t *testing.T, args ...string) (*Daemon, StatusClient) {
	t.Helper()
	bin, stateDir := writeFakeSupervisor(t)
	if len(args) == 0 {
		args = []string{"run", "--state-dir", stateDir}
	}
	d, err := StartDaemon(DaemonConfig{Bin: bin, Args: args, Env: os.Environ(), Output: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Kill(context.Background()); err != nil {
			t.Errorf("kill: %v", err)
		}
	})
	return d, StatusClient{Bin: bin, StateDir: stateDir}
}

func TestDaemonAwaitReadyAndTerminate(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	d, status := startFake(t)
	doc, err := d.AwaitReady(ctx, status, 10*time.Millisecond, func(doc StatusDoc) bool { return doc.Daemon.Listen != "" })
	if err != nil {
		t.Fatal(err)
	}
	if doc.Daemon.PID != d.PID() || doc.Daemon.Listen != "127.0.0.1:1" {
		t.Errorf("ready status = %+v, want pid %d and a listen address", doc.Daemon, d.PID())
	}
	if _, err := d.Terminate(ctx, time.Minute); err != nil {
		t.Errorf("terminate: %v, want a clean exit", err)
	}
	if d.Alive() || d.Killed() {
		t.Errorf("after terminate: alive %v, killed %v", d.Alive(), d.Killed())
	}
}

func TestDaemonAwaitReadyStopsWhenTheDaemonExits(t *testing.T) {
	t.Parallel()
	d, status := startFake(t, "fail")
	_, err := d.AwaitReady(testCtx(t), status, 10*time.Millisecond, nil)
	if err == nil || d.Alive() {
		t.Fatalf("err %v, alive %v: want an error for a daemon that exited", err, d.Alive())
	}
	var exitErr *exec.ExitError
	if !errors.As(d.ExitErr(), &exitErr) || exitErr.ExitCode() != 7 {
		t.Errorf("exit error %v, want status 7", d.ExitErr())
	}
}

func TestDaemonWaitGivesUpWithErrNotExited(t *testing.T) {
	t.Parallel()
	d, _ := startFake(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := d.Wait(ctx); !errors.Is(err, ErrNotExited) || !errors.Is(err, context.Canceled) {
		t.Errorf("wait on a running daemon = %v, want ErrNotExited and context.Canceled", err)
	}
}

func TestDaemonKillReachesTheGroup(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	d, status := startFake(t)
	if _, err := d.AwaitReady(ctx, status, 10*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	if err := d.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	var exitErr *exec.ExitError
	if !d.Killed() || d.Alive() || !errors.As(d.ExitErr(), &exitErr) {
		t.Fatalf("killed %v, alive %v, exit %v", d.Killed(), d.Alive(), d.ExitErr())
	}
	if ws, ok := exitErr.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Errorf("exit %v, want death by SIGKILL", d.ExitErr())
	}
	// The group is gone with its leader: the fake's sleep children were in it.
	if err := PollUntil(ctx, 10*time.Millisecond, func(context.Context) (bool, error) {
		return errors.Is(syscall.Kill(-d.PID(), 0), syscall.ESRCH), nil
	}); err != nil {
		t.Errorf("process group %d still has members: %v", d.PID(), err)
	}
}

func TestPollUntilReportsTheLastError(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	errLast := errors.New("still starting")
	err := PollUntil(ctx, time.Millisecond, func(context.Context) (bool, error) { return false, errLast })
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errLast) {
		t.Errorf("err = %v, want the deadline and the last error", err)
	}
}

func TestStartModelWritesCodexHome(t *testing.T) {
	t.Parallel()
	home := filepath.Join(t.TempDir(), "codex-home")
	m, err := StartModel(mockmodel.Config{}, home)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	b, err := os.ReadFile(filepath.Join(home, "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), m.URL()) || !strings.HasPrefix(m.URL(), "http://127.0.0.1:") {
		t.Errorf("config.toml does not point at the mock %s on loopback:\n%s", m.URL(), b)
	}
}

func TestPlatformEnvAndCleanEnv(t *testing.T) {
	t.Setenv("PLATFORM_URL", "http://elsewhere")
	t.Setenv("MOLECULE_WORKSPACE_TOKEN", "outer")
	t.Setenv("CODEX_WARM_X", "1")
	t.Setenv("HARNESS_KEEP", "yes")
	env := CleanEnv()
	for _, kv := range env {
		if strings.HasPrefix(kv, "PLATFORM_URL=") || strings.HasPrefix(kv, "MOLECULE_") || strings.HasPrefix(kv, "CODEX_WARM_") {
			t.Errorf("CleanEnv kept %s", kv)
		}
	}
	if !slices.Contains(env, "HARNESS_KEEP=yes") {
		t.Errorf("CleanEnv dropped an unrelated variable")
	}
	p := NewPlatform("ws-test", 1)
	defer p.Close()
	want := []string{"PLATFORM_URL=" + p.URL(), "WORKSPACE_ID=ws-test", "MOLECULE_WORKSPACE_TOKEN=" + p.Token()}
	if got := PlatformEnv(p); !slices.Equal(got, want) {
		t.Errorf("PlatformEnv = %v, want %v", got, want)
	}
}
