//go:build linux

package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/appserver/appservertest"
)

// `supervisor mock-model` runs the mock model on its own and prints the config.toml it wrote
// into --codex-home: real codex with that CODEX_HOME runs a turn against it, no login needed.
// SIGTERM stops it with exit status 0.
func TestMockModelCommand(t *testing.T) {
	t.Parallel()
	bin := appservertest.CodexBin(t)
	dir := t.TempDir()
	home := filepath.Join(dir, "codex-home")
	cmd := exec.Command(os.Args[0], "mock-model", "--listen", "127.0.0.1:0", "--codex-home", home)
	cmd.Env = append(os.Environ(), daemonEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()

	// The usage text ends with the curl line; read up to it.
	rd := bufio.NewReader(stdout)
	var printed strings.Builder
	for !strings.Contains(printed.String(), "curl -s") {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("mock-model output ended (%v):\n%s", err, printed.String())
		}
		printed.WriteString(line)
	}
	out := printed.String()
	written, err := os.ReadFile(filepath.Join(home, "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(written)), "\n") {
		if l != "" && !strings.Contains(out, "    "+l+"\n") {
			t.Errorf("printed config lacks %q:\n%s", l, out)
		}
	}
	for _, want := range []string{"mock model listening on http://127.0.0.1:", "the Responses websocket", "supports_websockets = true",
		"export CODEX_HOME=" + home, "supervisor run --inbox local"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := appservertest.ExecTurn(ctx, bin, home, dir, "", "hello")
	if err != nil || res.Reply != "reply #1: hello" {
		t.Fatalf("codex exec through the mock: %+v, %v", res, err)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(rd)
	if err := cmd.Wait(); err != nil {
		t.Errorf("mock-model exit: %v", err)
	}
	if !strings.Contains(string(rest), "mock model stopped after 1 requests") {
		t.Errorf("last words %q", rest)
	}
}
