package demo

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// A daemon that exits before it is ready fails the demo with a sentence saying so and the
// daemon's log, and the demo's temporary directory is gone.
func TestRunDaemonExitsEarly(t *testing.T) {
	t.Parallel()
	daemon := filepath.Join(t.TempDir(), "supervisor")
	if err := os.WriteFile(daemon, []byte("#!/bin/sh\necho \"cannot start: $*\"\nexit 3\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	err := Run(context.Background(), Config{Codex: "/nonexistent/codex", Supervisor: daemon, Stdout: &out, Stderr: &errOut})
	if err == nil || !strings.Contains(err.Error(), "daemon exited before it was ready") || !strings.Contains(err.Error(), "cannot start: run --inbox local") {
		t.Fatalf("Run = %v, want the early exit with the daemon's log", err)
	}
	m := regexp.MustCompile(`state dir +(\S+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no state dir in the output:\n%s", out.String())
	}
	if _, err := os.Stat(filepath.Dir(m[1])); !os.IsNotExist(err) {
		t.Errorf("the demo's directory %s is left (%v)", filepath.Dir(m[1]), err)
	}
}

// The mock model's usage names the config it wrote and the commands to try it with.
func TestMockUsage(t *testing.T) {
	t.Parallel()
	m, err := mockmodel.New(mockmodel.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	home := t.TempDir()
	var b bytes.Buffer
	MockUsage(&b, m, home)
	for _, want := range []string{m.URL(), "Wrote " + filepath.Join(home, "config.toml"), "export CODEX_HOME=" + home, "supervisor run --inbox local"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	MockUsage(&b, m, "")
	if !strings.Contains(b.String(), "export CODEX_HOME=$HOME/.codex-mock") || !strings.Contains(b.String(), "pass --codex-home DIR") {
		t.Errorf("usage without a home:\n%s", b.String())
	}
}
