//go:build linux

package main

// What an operator sees: fatal errors, the codex the daemon finds, the values its logs report.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A fatal error after the logger exists is reported once, as a JSON log line at error level:
// not a JSON line and then the same text again on stderr. The error for a missing codex names
// every way to give the daemon one.
func TestE2EFatalErrorPrintedOnce(t *testing.T) {
	e := newE2E(t, e2eConfig{Local: true})
	d := e.launch("--codex-bin", "/nonexistent/codex")
	d.waitFailed()
	d.checkLog()
	out := d.log()
	if n := strings.Count(out, "/nonexistent/codex"); n != 1 {
		t.Errorf("the error is printed %d times, want once:\n%s", n, out)
	}
	lines := d.logsWith("daemon stopped with an error")
	if len(lines) != 1 || lines[0].str("level") != "error" || !strings.Contains(lines[0].str("error"), "/nonexistent/codex") {
		t.Fatalf("want one error-level line naming the binary; log:\n%s", out)
	}
}

// With no --codex-bin, no CODEX_BIN, nothing beside the executable and no codex in PATH, the
// error says how to give the daemon a codex: --codex-bin, CODEX_BIN, make -s codex-bin.
func TestE2ENoCodexNamesEveryWayToGiveOne(t *testing.T) {
	e := newE2E(t, e2eConfig{Local: true, Env: []string{"PATH=" + t.TempDir()}})
	d := e.launch("--codex-bin=")
	d.waitFailed()
	lines := d.logsWith("daemon stopped with an error")
	if len(lines) != 1 {
		t.Fatalf("want one error line; log:\n%s", d.log())
	}
	msg := lines[0].str("error")
	for _, want := range []string{"no codex in PATH", "--codex-bin", "CODEX_BIN", "make -s codex-bin"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not name %s", msg, want)
		}
	}
}

// codex_home in the start-up log is the directory codex uses: $HOME/.codex when CODEX_HOME is
// unset or empty, not an empty string.
func TestE2ECodexHomeLoggedAsEffective(t *testing.T) {
	home := t.TempDir()
	e := newE2E(t, e2eConfig{Local: true, Env: []string{"HOME=" + home, "CODEX_HOME="}})
	if err := os.Mkdir(filepath.Join(home, ".codex"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := e.mock.WriteCodexHome(filepath.Join(home, ".codex")); err != nil {
		t.Fatal(err)
	}
	d := e.start()
	lines := d.logsWith("codex checked")
	if len(lines) != 1 || lines[0].str("codex_home") != filepath.Join(home, ".codex") {
		t.Errorf("codex checked lines %v, want codex_home %s", lines, filepath.Join(home, ".codex"))
	}
	d.stop(stopTimeout)
}
