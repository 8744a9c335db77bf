// Package fieldowner checks, from a package's tests, who may touch a struct's fields and how big a
// type's method set has grown. A package split into parts (a pool, a feed, a handover) keeps each
// part's state in a type of its own; Go's visibility rules cannot say "only this type's methods",
// so the package says it in a test (CheckReceivers: a part's fields are written only by its own
// methods and constructors; NoCrossLocked: no type calls another type's …Locked method), and a
// change that reaches into another part's state fails there instead of in review.
//
// It type-checks the package's non-test files from source against the export data of its
// imports (`go list -export`), so it needs the go command, as the tests do.
package fieldowner

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Package is one package's non-test files, parsed and type-checked.
type Package struct {
	Dir   string
	Fset  *token.FileSet
	Files map[string]*ast.File // by base name
	Types *types.Package
	Info  *types.Info
}

// Load parses and type-checks the non-test Go files of the package in dir.
func Load(dir string) (*Package, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	exports, self, err := exportData(abs)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	p := &Package{Dir: abs, Fset: fset, Files: map[string]*ast.File{}}
	var files []*ast.File
	// GoFiles are the package's non-test files that build here (go list applied the build
	// constraints).
	for _, name := range self.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(abs, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		p.Files[name] = f
		files = append(files, f)
	}
	lookup := func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok || file == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	}
	// Every touch of a field (a selector, a keyed literal) is a use of its Var; Defs name a
	// function's receiver, Types and Selections tell a write through a pointer from one into a
	// struct value.
	p.Info = &types.Info{Uses: map[*ast.Ident]types.Object{}, Defs: map[*ast.Ident]types.Object{},
		Types: map[ast.Expr]types.TypeAndValue{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "gc", lookup)}
	p.Types, err = conf.Check(self.ImportPath, fset, files, p.Info)
	if err != nil {
		return nil, fmt.Errorf("type-check %s: %w", self.ImportPath, err)
	}
	return p, nil
}

// listed is what go list says of a package.
type listed struct {
	ImportPath, Export string
	GoFiles            []string
	DepOnly            bool
}

// exportData runs `go list -export -deps` on dir and returns each dependency's export file and
// the package itself.
func exportData(dir string) (map[string]string, listed, error) {
	cmd := exec.Command("go", "list", "-export", "-deps", "-json=ImportPath,Export,GoFiles,DepOnly", ".")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, listed{}, fmt.Errorf("go list -export in %s: %w\n%s", dir, err, ee.Stderr)
		}
		return nil, listed{}, fmt.Errorf("go list -export in %s: %w", dir, err)
	}
	exports := map[string]string{}
	var self listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p listed
		if err := dec.Decode(&p); err != nil {
			return nil, listed{}, fmt.Errorf("go list -export in %s: %w", dir, err)
		}
		exports[p.ImportPath] = p.Export
		if !p.DepOnly {
			self = p
		}
	}
	if self.ImportPath == "" {
		return nil, listed{}, fmt.Errorf("go list -export in %s: no package", dir)
	}
	return exports, self, nil
}

// Methods counts what a type carries: its methods (value and pointer receivers) plus the
// package's functions that take the type, or a pointer to it, as a parameter. embedded names the
// type's embedded fields, which would promote another type's methods onto it.
func (p *Package) Methods(typeName string) (count int, embedded []string, err error) {
	obj := p.Types.Scope().Lookup(typeName)
	if obj == nil {
		return 0, nil, fmt.Errorf("%s: no type %s", p.Types.Path(), typeName)
	}
	named, ok := obj.Type().(*types.Named)
	if !ok {
		return 0, nil, fmt.Errorf("%s: %s is not a named type", p.Types.Path(), typeName)
	}
	count = named.NumMethods()
	if st, ok := named.Underlying().(*types.Struct); ok {
		for i := range st.NumFields() {
			if st.Field(i).Embedded() {
				embedded = append(embedded, st.Field(i).Name())
			}
		}
	}
	takes := func(t types.Type) bool {
		if ptr, ok := t.(*types.Pointer); ok {
			t = ptr.Elem()
		}
		return types.Identical(t, named)
	}
	scope := p.Types.Scope()
	for _, name := range scope.Names() {
		fn, ok := scope.Lookup(name).(*types.Func)
		if !ok {
			continue
		}
		params := fn.Type().(*types.Signature).Params()
		for i := range params.Len() {
			if takes(params.At(i).Type()) {
				count++
				break
			}
		}
	}
	return count, embedded, nil
}

// AtMost fails t when typeName carries more than limit methods (see Methods) or embeds a field.
func AtMost(t testing.TB, dir, typeName string, limit int) {
	t.Helper()
	p, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	n, embedded, err := p.Methods(typeName)
	if err != nil {
		t.Fatal(err)
	}
	if n > limit {
		t.Errorf("%s carries %d methods and functions, at most %d: a new one belongs in one of its parts", typeName, n, limit)
	}
	if len(embedded) > 0 {
		t.Errorf("%s embeds %v: embedding promotes a part's methods onto it; name the field", typeName, embedded)
	}
}
