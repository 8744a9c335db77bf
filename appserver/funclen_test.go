package appserver

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// maxFuncLines bounds a product function, from its func line to its closing brace: past it a
// function does more than one reader can follow, and its steps want names of their own
// (issue 44).
const maxFuncLines = 120

// funcLenAllowed are the functions allowed over maxFuncLines, as package-relative
// "dir.Receiver.Name" (or "dir.Name"): none. Split a long function into named steps instead.
var funcLenAllowed = []string{}

// funcLenExempt says whether a package (its path in the module) is left out of the rule: the
// side-by-side benchmarks and the soak drive the daemon from outside, and the test doubles
// (a directory whose name ends in "test", and internal/fieldowner) are test code.
func funcLenExempt(rel string) bool {
	switch {
	case rel == "cmd/bench" || strings.HasPrefix(rel, "cmd/bench/"),
		rel == "cmd/soak" || strings.HasPrefix(rel, "cmd/soak/"),
		rel == "internal/fieldowner",
		strings.HasSuffix(path.Base(rel), "test"):
		return true
	}
	return false
}

// longFuncs returns the functions of one parsed file over maxFuncLines, each as "name (N
// lines) at position", the name qualified by rel as funcLenAllowed spells it.
func longFuncs(fset *token.FileSet, f *ast.File, rel string) map[string]string {
	long := map[string]string{}
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		start, end := fset.Position(fn.Pos()), fset.Position(fn.End())
		n := end.Line - start.Line + 1
		if n <= maxFuncLines {
			continue
		}
		name := fn.Name.Name
		if fn.Recv != nil && len(fn.Recv.List) == 1 {
			name = recvName(fn.Recv.List[0].Type) + "." + name
		}
		long[rel+"."+name] = fmt.Sprintf("%d lines at %s", n, start)
	}
	return long
}

// recvName is a receiver's type name without its pointer and type parameters.
func recvName(x ast.Expr) string {
	for {
		switch t := x.(type) {
		case *ast.StarExpr:
			x = t.X
		case *ast.IndexExpr:
			x = t.X
		case *ast.IndexListExpr:
			x = t.X
		case *ast.Ident:
			return t.Name
		default:
			return fmt.Sprintf("%T", x)
		}
	}
}

// TestNoProductFunctionOver120Lines pins maxFuncLines over the module's product code: the
// non-test Go files the build compiles, of every package but those funcLenExempt leaves out.
func TestNoProductFunctionOver120Lines(t *testing.T) {
	const mod = "github.com/molecule-ai/codex-warm"
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{.Dir}}{{range .GoFiles}} {{.}}{{end}}", "../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	fset := token.NewFileSet()
	long := map[string]string{}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		rel := strings.TrimPrefix(strings.TrimPrefix(fields[0], mod), "/")
		if funcLenExempt(rel) {
			continue
		}
		for _, name := range fields[2:] {
			f, err := parser.ParseFile(fset, filepath.Join(fields[1], name), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			checked++
			for k, v := range longFuncs(fset, f, rel) {
				long[k] = v
			}
		}
	}
	if checked < 100 {
		t.Fatalf("checked %d files, expected the module's", checked)
	}
	for _, name := range slices.Sorted(maps.Keys(long)) {
		if !slices.Contains(funcLenAllowed, name) {
			t.Errorf("%s has %s, more than %d: split it into named steps", name, long[name], maxFuncLines)
		}
	}
	for _, name := range funcLenAllowed {
		if _, ok := long[name]; !ok {
			t.Errorf("%s is on funcLenAllowed but no longer over %d lines (or gone): take it off the list", name, maxFuncLines)
		}
	}
}

// TestFuncLenSeesAPlantedViolation feeds the checker a generated function of maxFuncLines+1
// lines, a method of as many, and one of exactly maxFuncLines: the first two are caught, the
// last is not.
func TestFuncLenSeesAPlantedViolation(t *testing.T) {
	body := func(name string, lines int) string {
		// func line + (lines-2) statements + closing brace
		var b strings.Builder
		b.WriteString(name + " {\n")
		for i := range lines - 2 {
			fmt.Fprintf(&b, "\t_ = %d\n", i)
		}
		b.WriteString("}\n")
		return b.String()
	}
	src := "package planted\n\ntype T struct{}\n\n" +
		body("func tooLong()", maxFuncLines+1) +
		body("func (t *T) alsoTooLong()", maxFuncLines+1) +
		body("func justFits()", maxFuncLines)
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "planted.go", src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	got := longFuncs(fset, f, "planted")
	for _, want := range []string{"planted.tooLong", "planted.T.alsoTooLong"} {
		if _, ok := got[want]; !ok {
			t.Errorf("the planted %s (%d lines) was not caught: %v", want, maxFuncLines+1, got)
		}
	}
	if v, ok := got["planted.justFits"]; ok {
		t.Errorf("justFits has exactly %d lines and was caught: %s", maxFuncLines, v)
	}
	if len(got) != 2 {
		t.Errorf("caught %d functions, want 2: %v", len(got), got)
	}
	for _, rel := range []string{"cmd/bench", "cmd/soak", "appserver/appservertest", "bridge/molecule/moleculetest",
		"bridge/chat/chattest", "internal/exectest", "internal/fieldowner"} {
		if !funcLenExempt(rel) {
			t.Errorf("%s should be left out of the rule", rel)
		}
	}
	for _, rel := range []string{"supervisor", "internal/daemon", "cmd/supervisor", "cmd/internal/harness"} {
		if funcLenExempt(rel) {
			t.Errorf("%s is product code and was left out of the rule", rel)
		}
	}
}
