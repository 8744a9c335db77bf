package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/daemon"
)

// hardenHelperEnv selects a helper-process mode of the test binary: "harden" runs HardenProcess,
// "plain" does not; either way it prints what its own environment still says about the token,
// then waits for stdin to close.
const hardenHelperEnv = "CODEX_WARM_HARDEN_HELPER"

func hardenHelper(mode string) int {
	if mode == "harden" {
		daemon.HardenProcess(zap.NewNop())
	}
	fmt.Printf("token=%s\n", os.Getenv("MOLECULE_WORKSPACE_TOKEN"))
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// A command codex runs for the model runs as the daemon's user. After HardenProcess it can no
// longer read the workspace token from the daemon's /proc/<pid>/environ (which keeps the start
// environment whatever the process unsets); without it, it can. Both processes run as one
// unprivileged user: root could read any process's files anyway.
func TestHardenProcessHidesTheStartEnvironment(t *testing.T) {
	t.Parallel()
	const token = "tok-3f9a1c"
	cred := sameUnprivilegedUser(t)
	bin := copyTestBinary(t)
	for _, tc := range []struct {
		mode         string
		wantReadable bool
	}{{"plain", true}, {"harden", false}} {
		t.Run(tc.mode, func(t *testing.T) {
			helper := exec.Command(bin)
			helper.Env = []string{hardenHelperEnv + "=" + tc.mode, "MOLECULE_WORKSPACE_TOKEN=" + token, "CONFIGS_DIR=/configs"}
			helper.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
			stdin, err := helper.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			out, err := helper.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			helper.Stderr = os.Stderr
			if err := helper.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				_ = stdin.Close()
				if err := helper.Wait(); err != nil {
					t.Errorf("helper: %v", err)
				}
			}()
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil {
				t.Fatalf("helper said nothing: %v", err)
			}
			if got, want := strings.TrimSpace(line), "token="+map[bool]string{true: token, false: ""}[tc.wantReadable]; got != want {
				t.Errorf("helper's own environment: %q, want %q", got, want)
			}
			// The reader is another process of the same user, as a tool command of codex is.
			rd := exec.Command("cat", fmt.Sprintf("/proc/%d/environ", helper.Process.Pid))
			rd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
			environ, err := rd.Output()
			readable := err == nil && strings.Contains(string(environ), token)
			if readable != tc.wantReadable {
				t.Errorf("token readable from /proc/%d/environ by the same user: %v, want %v (cat: %v)", helper.Process.Pid, readable, tc.wantReadable, err)
			}
		})
	}
}

// sameUnprivilegedUser is the credential both processes of the test run as: nobody when the
// test runs as root, else the test's own user (nil: no change).
func sameUnprivilegedUser(t *testing.T) *syscall.Credential {
	t.Helper()
	if os.Getuid() != 0 {
		return nil
	}
	return &syscall.Credential{Uid: 65534, Gid: 65534}
}

// copyTestBinary puts the test binary where an unprivileged user can execute it (the build
// directory may be private to the user who built it).
func copyTestBinary(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cwharden-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst := filepath.Join(dir, "helper")
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, src); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return dst
}
