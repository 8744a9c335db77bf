package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/exectest"
)

// --child-user runs the codex children as another user: the conversation works, the child runs
// under that uid, and so the commands it runs for the model cannot read the daemon's state
// directory (0700, the daemon's user) nor its process.
func TestE2EChildUser(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("starting children as another user needs root; CI runs as root")
	}
	const nobody = 65534
	e := newE2E(t, e2eConfig{Local: true})
	// The child user needs its CODEX_HOME and the threads' working directory, and a way to them.
	if err := os.Chmod(e.root, 0o755); err != nil {
		t.Fatal(err)
	}
	// And a codex it can execute: the one under test may lie in a checkout nobody cannot enter
	// (root's clone in /root, 0700).
	e.codexBin = codexFor(t, e.codexBin, filepath.Join(e.root, "bin"), &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}})
	for _, dir := range []string{e.codexHome, e.workDir} {
		if err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, nobody, nobody)
		}); err != nil {
			t.Fatal(err)
		}
	}
	// No spare: codex 0.169, started twice at once on a fresh CODEX_HOME, can create its
	// thread-writer-locks directory with mode 0600 (seen once under load: a spare and the first
	// chat's child starting threads together); as a non-root user every thread/start then fails
	// with "Permission denied". docs/security.md names the fix; this test is about the uid.
	d := e.start("--child-user", "nobody", "--spares", "0")
	c := newLocalClient(t, d)
	if r := c.send("alpha", "hello"); r.Text != "reply #1: hello" {
		t.Fatalf("reply: %+v", r)
	}
	if r := c.send("alpha", "again"); r.Text != "reply #2: again" {
		t.Fatalf("second reply: %+v", r)
	}
	pid := childPID(d.status(), "alpha")
	if pid == 0 {
		t.Fatal("no child for alpha")
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	var uidLine string
	for _, l := range strings.Split(string(st), "\n") {
		if strings.HasPrefix(l, "Uid:") {
			uidLine = l
		}
	}
	if f := strings.Fields(uidLine); len(f) != 5 || f[1] != "65534" || f[2] != "65534" {
		t.Fatalf("codex child %d runs as %q, want uid 65534", pid, uidLine)
	}
	info, err := os.Stat(e.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm()&0o077 != 0 {
		t.Fatalf("state dir %s is %v: the child user could read it", e.stateDir, info.Mode().Perm())
	}
}

// run with --child-user tries, as that user, what every codex child does first, and refuses to
// start when codex cannot run: a codex in a directory the user cannot enter (root's 0700
// checkout) used to fail only at the first message, with "fork/exec …: permission denied".
func TestE2EChildUserCannotRunCodex(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("starting children as another user needs root; CI runs as root")
	}
	e := newE2E(t, e2eConfig{Local: true}) // e.root is 0700: closed to nobody
	closed := filepath.Join(e.root, "bin", "codex")
	linkCodex(t, e.codexBin, closed)
	e.codexBin = closed
	d := e.launch("--child-user", "nobody", "--spares", "0")
	d.waitFailed()
	for _, want := range []string{"--child-user nobody cannot execute codex " + closed + ": permission denied",
		"chmod o+x " + e.root, "--child-user nobody cannot write in CODEX_HOME " + e.codexHome} {
		if !strings.Contains(d.log(), want) {
			t.Errorf("log lacks %q:\n%s", want, d.logTail(4000))
		}
	}
}

// codexFor returns a codex that cred can execute: bin itself when it can, else bin linked (or,
// across file systems, copied) into dir, made 0755 here. It fails when cred cannot execute that
// either, naming the directory on the way it cannot enter.
func codexFor(t *testing.T, bin, dir string, cred *syscall.Credential) string {
	t.Helper()
	if _, err := appserver.VersionAs(t.Context(), bin, nil, cred); err == nil {
		return bin
	}
	p := filepath.Join(dir, "codex")
	linkCodex(t, bin, p)
	if _, err := appserver.VersionAs(t.Context(), p, nil, cred); err != nil {
		t.Fatalf("uid %d cannot execute codex %s either (is every directory above %s searchable by others?): %v", cred.Uid, p, dir, err)
	}
	return p
}

// linkCodex puts bin at to, in a directory made 0755: a hard link, or a copy where a link cannot
// be made (another file system).
func linkCodex(t *testing.T, bin, to string) {
	t.Helper()
	dir := filepath.Dir(to)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(bin, to); err != nil {
		data, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		if err := exectest.WriteExecutable(to, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}
