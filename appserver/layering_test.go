package appserver

import (
	"bytes"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The flow runs downward: inboxes → supervisor → appserver → childproc. The transport hands back
// what codex reported, and whoever needs a reply derives it (projector): an import of a package
// that digests turns, or of one above the transport, would turn that around. Above the
// supervisor, what both inboxes share (inbox/chat) knows neither inbox, and neither inbox knows
// the other, in their tests too: a change to the Molecule poll never has to pass the HTTP guard.
func TestImportsRunDownward(t *testing.T) {
	const mod = "github.com/molecule-ai/codex-warm/"
	// allowedBelow are the packages below a forbidden path that a package may import all the same:
	// parts of the inbox beside it that know nothing of the inbox either.
	allowedBelow := map[string][]string{
		"../bridge/molecule/inbound": {"bridge/molecule/ledger", "bridge/molecule/platform"},
	}
	for _, rule := range []struct {
		dir string // relative to this package
		// forbidden are module paths the package must not import, nor any package below them.
		forbidden []string
		// tests also checks the imports of the package's tests.
		tests bool
	}{
		{".", []string{"projector", "sessions", "supervisor", "bridge", "cmd"}, false},
		{"../internal/childproc", []string{"appserver", "supervisor", "bridge", "cmd"}, true},
		{"../supervisor", []string{"bridge", "cmd"}, true},
		// The account's state (model reachability, usage limits and parking, token totals) is a
		// part of the supervisor below it: it knows no child, chat queue or inbox.
		{"../supervisor/account", []string{"appserver", "internal/childproc", "supervisor", "bridge", "cmd"}, true},
		// The shared children are a part of the supervisor's pool below it: hosts place threads in
		// children and know no chat, queue or inbox.
		{"../supervisor/hosts", []string{"internal/childproc", "supervisor", "bridge", "cmd"}, true},
		// What a running turn is doing (its steps, its one-line activity) is read from the
		// turn's notifications alone: no child, chat queue or inbox.
		{"../supervisor/progress", []string{"internal/childproc", "supervisor", "bridge", "cmd"}, true},
		// The approvals board, the slots and a turn's watchdogs are parts of the supervisor below
		// it: they know no child process, chat queue or inbox (the watchdogs read a turn's
		// notifications with progress).
		{"../supervisor/approvals", []string{"internal/childproc", "supervisor", "bridge", "cmd"}, true},
		{"../supervisor/slots", []string{"appserver", "internal/childproc", "supervisor", "bridge", "cmd"}, true},
		{"../supervisor/turnwatch", []string{"internal/childproc", "supervisor/account", "supervisor/hosts", "bridge", "cmd"}, true},
		{"../bridge/chat", []string{"bridge/molecule", "bridge/local", "cmd"}, true},
		{"../bridge/chat/chattest", []string{"bridge/molecule", "bridge/local", "cmd"}, false},
		{"../bridge/molecule", []string{"bridge/local", "cmd"}, true},
		{"../bridge/molecule/moleculetest", []string{"bridge/local", "cmd"}, true},
		// The platform client knows nothing of the inbox that uses it, nor of what answers (its
		// tests may use the fake platform, moleculetest).
		{"../bridge/molecule/platform", []string{"bridge/molecule", "bridge/local", "supervisor", "appserver", "cmd"}, false},
		// The delivery ledger is the inbox's durable state and nothing else: it knows nothing of
		// the inbox that fills it, nor of the platform, nor of what answers.
		{"../bridge/molecule/ledger", []string{"bridge/molecule", "bridge/local", "supervisor", "appserver", "cmd"}, true},
		// What a platform row becomes (a message, its chat key and route) is read from the row
		// alone: it knows nothing of the inbox that queues it, nor of what answers. It uses the
		// ledger's route and the platform's row helpers (allowedBelow); its tests may use the
		// fake platform, moleculetest.
		{"../bridge/molecule/inbound", []string{"bridge/molecule", "bridge/local", "supervisor", "appserver", "cmd"}, false},
		{"../bridge/local", []string{"bridge/molecule", "cmd"}, true},
		// The daemon's ChatGPT login sits beside the flow: appserver consumes it through an
		// interface of its own, and it knows nothing above the wire types.
		{"../internal/codexauth", []string{"appserver", "internal/childproc", "supervisor", "bridge", "cmd"}, true},
		// The reload's handoff document is a format and nothing else: cmd/supervisor wires it to
		// the pool and the transport.
		{"../internal/daemon/handoff", []string{"appserver", "internal/childproc", "supervisor", "bridge", "sessions", "cmd"}, true},
		// The control socket's wire, server and client sit just below the binary: they carry
		// the supervisor's and the inboxes' status, and run nothing of theirs.
		{"../internal/control", []string{"appserver", "internal/childproc", "sessions", "internal/daemon", "internal/doctor", "cmd"}, true},
		// The doctor's checks sit beside the daemon, below the binary: the daemon's own start-up
		// steps reach them as functions (Config.Steps), never as an import of the binary.
		{"../internal/doctor", []string{"internal/daemon", "cmd"}, true},
		// The daemon's assembly sits just below the binary, which parses the command line.
		{"../internal/daemon", []string{"cmd"}, true},
		// The demo runs the binary as a child process; it never imports it.
		{"../internal/demo", []string{"cmd"}, true},
		// The spares' canned model is a leaf the daemon owns: children reach it over loopback.
		{"../internal/cannedmodel", []string{"appserver", "internal/childproc", "supervisor", "bridge", "cmd", "internal/mockmodel"}, true},
		// The one secret set is a leaf every outbound path reads: it knows nothing of them.
		{"../internal/secretset", []string{"appserver", "internal/childproc", "supervisor", "bridge", "internal/codexauth", "internal/chatfiles", "internal/daemon", "cmd"}, true},
		// Retention keeps the archive log; the codex calls it makes come through an interface.
		{"../internal/retention", []string{"appserver", "internal/childproc", "supervisor", "bridge", "cmd"}, true},
	} {
		pkg, err := build.ImportDir(rule.dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		imports := pkg.Imports
		if rule.tests {
			imports = slices.Concat(imports, pkg.TestImports, pkg.XTestImports)
		}
		for _, imp := range imports {
			if slices.Contains(allowedBelow[rule.dir], strings.TrimPrefix(imp, mod)) {
				continue
			}
			for _, f := range rule.forbidden {
				if imp == mod+f || strings.HasPrefix(imp, mod+f+"/") {
					t.Errorf("%s imports %s", strings.TrimPrefix(rule.dir, "../"), imp)
				}
			}
		}
	}
}

// TestOnlyChildprocReadsOtherProcesses pins that looking at other processes (their stat,
// memory, locks, names) lives in one place, childproc's ProcFS: no other package of the daemon
// imports procfs or names a /proc path but its own (/proc/self). cmd/bench and cmd/soak, which
// measure the daemon from outside, are not the daemon.
func TestOnlyChildprocReadsOtherProcesses(t *testing.T) {
	const mod = "github.com/molecule-ai/codex-warm/"
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .GoFiles}} {{$.Dir}}/{{.}}{{end}}", "../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, files := fields[0], fields[1:]
		switch strings.TrimPrefix(pkg, mod) {
		case "internal/childproc", "cmd/bench", "cmd/soak":
			continue
		}
		for _, name := range files {
			f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			checked++
			for _, imp := range f.Imports {
				if strings.Contains(imp.Path.Value, "prometheus/procfs") {
					t.Errorf("%s imports procfs: other processes are read through childproc.ProcFS", fset.Position(imp.Pos()))
				}
			}
			ast.Inspect(f, func(n ast.Node) bool {
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				v := strings.Trim(lit.Value, "`\"")
				if strings.Contains(v, "/proc/") && !strings.HasPrefix(v, "/proc/self") {
					t.Errorf("%s names %s: other processes are read through childproc.ProcFS", fset.Position(lit.Pos()), lit.Value)
				}
				return true
			})
		}
	}
	if checked < 50 {
		t.Fatalf("checked %d files, expected the module's", checked)
	}
}

// maxPackageLines bounds a package's non-test source: past it a package holds more than one
// reader can keep in mind, and a part of it wants a package of its own (docs/development.md).
const maxPackageLines = 6000

// TestNoPackageOutgrowsOneReader pins maxPackageLines for every package of the module.
func TestNoPackageOutgrowsOneReader(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}{{range .GoFiles}} {{.}}{{end}}", "../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		dir, files, _ := strings.Cut(line, " ")
		lines := 0
		for _, f := range strings.Fields(files) {
			b, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				t.Fatal(err)
			}
			lines += bytes.Count(b, []byte("\n"))
		}
		if lines > maxPackageLines {
			t.Errorf("%s has %d lines of non-test Go, more than %d: give one of its parts a package of its own", dir, lines, maxPackageLines)
		}
	}
}

// designCardTopLevel is the architecture a reader sees at the module's root: the design card's
// packages, the docs and the deployment files; supporting detail lives under internal/.
var designCardTopLevel = []string{"appserver", "bridge", "cmd", "deploy", "docs", "internal", "projector", "sessions", "supervisor", "testdata"}

// strayTopLevel names the directories at root that hold Go files (anywhere below them) and are
// not on the design card's list.
func strayTopLevel(t *testing.T, root string) []string {
	t.Helper()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var stray []string
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || strings.HasPrefix(name, ".") || slices.Contains(designCardTopLevel, name) {
			continue
		}
		hasGo := false
		err := filepath.WalkDir(filepath.Join(root, name), func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && strings.HasSuffix(path, ".go") {
				hasGo = true
				return filepath.SkipAll
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if hasGo {
			stray = append(stray, name)
		}
	}
	return stray
}

// TestTopLevelIsTheDesignCards pins the module's root to the design card's architecture (cmd,
// appserver, supervisor, projector, bridge, sessions, testdata), with docs, deploy and internal
// beside it; a new package goes under internal/ or under the one package that imports it.
func TestTopLevelIsTheDesignCards(t *testing.T) {
	if stray := strayTopLevel(t, ".."); len(stray) > 0 {
		t.Errorf("top-level directories of Go code outside the design card's list %v: %v (move them under internal/)", designCardTopLevel, stray)
	}
	planted := t.TempDir()
	for _, dir := range []string{"supervisor", "childproc/sub", "notes"} {
		if err := os.MkdirAll(filepath.Join(planted, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"supervisor/s.go", "childproc/sub/p.go", "notes/README.md"} {
		if err := os.WriteFile(filepath.Join(planted, f), []byte("package x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := strayTopLevel(t, planted); !slices.Equal(got, []string{"childproc"}) {
		t.Errorf("planted tree: got %v, want [childproc]", got)
	}
}
