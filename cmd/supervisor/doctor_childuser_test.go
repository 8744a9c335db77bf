//go:build linux

package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// With --child-user, doctor tries as that user what its codex children do first: a codex the
// user cannot reach (in root's 0700 directory), and a CODEX_HOME and working directory it
// cannot write, fail with the fix; the same files made reachable and owned by it pass.
func TestDoctorChildUser(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("running as another user needs root; CI runs as root")
	}
	const nobody = 65534
	e := newDoctorEnv(t) // e.root is 0700: closed to nobody
	work := filepath.Join(e.root, "work")
	if err := os.Mkdir(work, 0o700); err != nil {
		t.Fatal(err)
	}
	closed := filepath.Join(e.root, "bin-closed", "codex")
	linkCodex(t, e.codexBin, closed)

	r := e.run("--child-user", "nobody", "--codex-bin", closed, "--cwd", work)
	m, text := r.line("child user")
	for _, want := range []string{
		"--child-user nobody cannot execute codex " + closed + ": permission denied",
		"chmod o+x " + e.root,
		"`make install`",
		"--child-user nobody cannot write in CODEX_HOME " + e.codexHome,
		"chown -R nobody " + e.codexHome,
		"cannot write in the threads' working directory " + work,
		"every message would fail",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("child user line lacks %q: %s %s", want, m, text)
		}
	}
	if m != "✗" || r.code != 1 {
		t.Errorf("child user: mark %q, exit %d; output:\n%s", m, r.code, r.out)
	}

	// Reachable and owned: the same checks pass.
	if err := os.Chmod(e.root, 0o755); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(e.root, "bin-open", "codex")
	linkCodex(t, e.codexBin, open)
	for _, dir := range []string{e.codexHome, work} {
		if err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, nobody, nobody)
		}); err != nil {
			t.Fatal(err)
		}
	}
	r = e.run("--child-user", "nobody", "--codex-bin", open, "--cwd", work)
	if m, text := r.line("child user"); m != "✓" || !strings.Contains(text, "nobody (uid 65534) executes "+open+" and writes in CODEX_HOME "+e.codexHome+" and the working directory "+work) {
		t.Errorf("child user: %s %s\n%s", m, text, r.out)
	}
	if m, text := (doctorRun{out: e.run().out}).line("child user"); m != "-" || !strings.Contains(text, "not used") {
		t.Errorf("without --child-user: %s %s", m, text)
	}
}
