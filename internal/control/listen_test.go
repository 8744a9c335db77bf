package control

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// processUmask is the umask /proc says this process has.
func processUmask(t *testing.T) string {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Umask:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no Umask in /proc/self/status (%v)", sc.Err())
	return ""
}

// The control socket is 0600 from its bind, and the process's umask stays what it was: the
// umask is the process's, and a codex child forked while the daemon had narrowed it (to create
// the socket 0600) kept 0177, so that it created CODEX_HOME/thread-writer-locks 0600, a directory
// without the search bit, which no codex child of a daemon without CAP_DAC_OVERRIDE could use
// again (TestE2EReloadNothingReadable failed on it).
func TestControlSocketPrivateWithoutUmask(t *testing.T) {
	before := processUmask(t)
	path := filepath.Join(t.TempDir(), SocketName)
	ln, err := ListenPrivateUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("the socket file has mode %v, want a socket 0600", fi.Mode())
	}
	if after := processUmask(t); after != before {
		t.Errorf("the process umask went from %s to %s", before, after)
	}
	// It answers on the path.
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	defer func() { srv.Close(); <-served }()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// No code of the daemon (any package of the module) changes the umask: it is the process's,
// and every child forked by another goroutine meanwhile would keep the changed one for life.
func TestNoUmaskChange(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	fset := token.NewFileSet()
	n := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		n++
		ast.Inspect(f, func(x ast.Node) bool {
			if sel, ok := x.(*ast.SelectorExpr); ok && sel.Sel.Name == "Umask" {
				t.Errorf("%s calls %s.Umask", fset.Position(sel.Pos()), sel.X)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no Go file found")
	}
}
