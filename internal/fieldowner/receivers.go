package fieldowner

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// Access is what a part keeps to its own methods and constructors.
type Access int

const (
	// Writes: only the part's methods and constructors write its fields; others may read them.
	Writes Access = iota
	// Uses: only the part's methods and constructors touch its fields at all (a lock's holder,
	// whose state must not be reached around its lock).
	Uses
)

// Offence is one touch of a part's field by a function that is not the part's, or one call of
// a type's …Locked method from a function of another type.
type Offence struct {
	Type, Name string // the part and its field, or the type and its …Locked method
	By         string // the function: "T.method", or the plain function's name
	Pos        token.Position
}

// A function's owner is its receiver's type; a plain function is its results' types'
// constructor. A function literal belongs to the declaration it is written in.
func (p *Package) owners(fd *ast.FuncDecl) (recv *types.TypeName, ctors map[*types.TypeName]bool) {
	obj, _ := p.Info.Defs[fd.Name].(*types.Func)
	if obj == nil {
		return nil, nil
	}
	sig := obj.Type().(*types.Signature)
	if r := sig.Recv(); r != nil {
		return namedOf(r.Type()), nil
	}
	ctors = map[*types.TypeName]bool{}
	for i := range sig.Results().Len() {
		if tn := namedOf(sig.Results().At(i).Type()); tn != nil {
			ctors[tn] = true
		}
	}
	return nil, ctors
}

// namedOf is the type name of T or *T, nil for any other type.
func namedOf(t types.Type) *types.TypeName {
	if ptr, ok := t.(*types.Pointer); ok {
		t = ptr.Elem()
	}
	if n, ok := types.Unalias(t).(*types.Named); ok {
		return n.Obj()
	}
	return nil
}

func funcName(fd *ast.FuncDecl, recv *types.TypeName) string {
	if recv != nil {
		return recv.Name() + "." + fd.Name.Name
	}
	return fd.Name.Name
}

// Strangers lists the touches of the parts' fields by functions that are neither the part's
// methods nor its constructors: writes for a part with Writes (an assignment, ++ or --, taking
// its address, calling a pointer method on it, delete or clear of it, also through a field of
// the part that is a struct value), any use for a part with Uses. A part that does not exist is
// an error, so the list cannot go stale silently.
func (p *Package) Strangers(parts map[string]Access) ([]Offence, error) {
	owned := map[*types.Var]*types.TypeName{}
	for name := range parts {
		obj, ok := p.Types.Scope().Lookup(name).(*types.TypeName)
		if !ok {
			return nil, fmt.Errorf("%s: no type %s", p.Types.Path(), name)
		}
		st, ok := obj.Type().Underlying().(*types.Struct)
		if !ok {
			return nil, fmt.Errorf("%s: %s is not a struct", p.Types.Path(), name)
		}
		for i := range st.NumFields() {
			owned[st.Field(i)] = obj
		}
	}
	var out []Offence
	for _, f := range p.Files {
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			recv, ctors := p.owners(fd)
			may := func(part *types.TypeName) bool { return part == recv || ctors[part] }
			report := func(id *ast.Ident, write bool) {
				v, ok := p.Info.Uses[id].(*types.Var)
				if !ok || !v.IsField() {
					return
				}
				part, ok := owned[v]
				if !ok || may(part) || (!write && parts[part.Name()] != Uses) {
					return
				}
				out = append(out, Offence{Type: part.Name(), Name: v.Name(), By: funcName(fd, recv), Pos: p.Fset.Position(id.Pos())})
			}
			written := p.writtenSelectors(fd.Body)
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok {
					report(sel.Sel, written[sel])
				}
				if kv, ok := n.(*ast.KeyValueExpr); ok {
					// A keyed composite literal sets the fields of a new value: a write.
					if id, ok := kv.Key.(*ast.Ident); ok {
						report(id, true)
					}
				}
				return true
			})
		}
	}
	sortOffences(out)
	return out, nil
}

// writtenSelectors are the field selectors in body that a statement writes: the left of an
// assignment, ++ and --, the operand of &, the receiver of a pointer method, the map or slice
// of delete and clear; and each struct value field they are selected through.
func (p *Package) writtenSelectors(body *ast.BlockStmt) map[*ast.SelectorExpr]bool {
	written := map[*ast.SelectorExpr]bool{}
	mark := func(e ast.Expr) {
		for {
			switch x := e.(type) {
			case *ast.ParenExpr:
				e = x.X
			case *ast.IndexExpr:
				e = x.X
			case *ast.SelectorExpr:
				if sel := p.selection(x); sel == nil || sel.Kind() != types.FieldVal {
					return
				}
				written[x] = true
				// Through a pointer the write is the pointee's, not the field's that holds it.
				if t := p.typeOf(x.X); t == nil || isPointer(t) {
					return
				}
				e = x.X
			default:
				return
			}
		}
	}
	ast.Inspect(body, func(n ast.Node) bool {
		switch s := n.(type) {
		case *ast.AssignStmt:
			if s.Tok != token.DEFINE {
				for _, l := range s.Lhs {
					mark(l)
				}
			}
		case *ast.IncDecStmt:
			mark(s.X)
		case *ast.UnaryExpr:
			if s.Op == token.AND {
				mark(s.X)
			}
		case *ast.CallExpr:
			p.markCall(s, mark)
		}
		return true
	})
	return written
}

// markCall marks what a call writes: the receiver of a pointer method called on a value, and
// the first argument of delete and clear.
func (p *Package) markCall(c *ast.CallExpr, mark func(ast.Expr)) {
	switch fn := c.Fun.(type) {
	case *ast.Ident:
		if b, ok := p.Info.Uses[fn].(*types.Builtin); ok && (b.Name() == "delete" || b.Name() == "clear") && len(c.Args) > 0 {
			mark(c.Args[0])
		}
	case *ast.SelectorExpr:
		m, ok := p.Info.Uses[fn.Sel].(*types.Func)
		if !ok {
			return
		}
		recv := m.Type().(*types.Signature).Recv()
		if recv == nil || !isPointer(recv.Type()) {
			return
		}
		if t := p.typeOf(fn.X); t != nil && !isPointer(t) {
			mark(fn.X)
		}
	}
}

func (p *Package) selection(x *ast.SelectorExpr) *types.Selection {
	if p.Info.Selections == nil {
		return nil
	}
	return p.Info.Selections[x]
}

func (p *Package) typeOf(e ast.Expr) types.Type {
	if tv, ok := p.Info.Types[e]; ok {
		return tv.Type
	}
	return nil
}

func isPointer(t types.Type) bool {
	_, ok := t.Underlying().(*types.Pointer)
	return ok
}

// CrossLocked lists the uses (calls and method values) of a method whose name ends in
// "Locked", of a type of this package, by a function that is neither a method of that type nor
// its constructor. A …Locked method runs with its type's lock held: a caller of another type holding
// that lock is two types sharing one lock.
func (p *Package) CrossLocked() []Offence {
	var out []Offence
	for _, f := range p.Files {
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			recv, ctors := p.owners(fd)
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				m, ok := p.Info.Uses[sel.Sel].(*types.Func)
				if !ok || !strings.HasSuffix(m.Name(), "Locked") || m.Pkg() != p.Types {
					return true
				}
				r := m.Type().(*types.Signature).Recv()
				if r == nil {
					return true
				}
				if owner := namedOf(r.Type()); owner != nil && owner != recv && !ctors[owner] {
					out = append(out, Offence{Type: owner.Name(), Name: m.Name(), By: funcName(fd, recv), Pos: p.Fset.Position(sel.Sel.Pos())})
				}
				return true
			})
		}
	}
	sortOffences(out)
	return out
}

func sortOffences(out []Offence) {
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Pos, out[j].Pos
		if a.Filename != b.Filename {
			return a.Filename < b.Filename
		}
		return a.Offset < b.Offset
	})
}

// CheckReceivers fails t for every touch of a part's field by a function that is not its own
// (see Strangers).
func CheckReceivers(t testing.TB, dir string, parts map[string]Access) {
	t.Helper()
	p, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	offences, err := p.Strangers(parts)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range offences {
		what := "writes"
		if parts[o.Type] == Uses {
			what = "touches"
		}
		t.Errorf("%s:%d: %s %s %s.%s: only %s's own methods and constructors may", filepath.Base(o.Pos.Filename), o.Pos.Line, o.By, what, o.Type, o.Name, o.Type)
	}
}

// NoCrossLocked fails t for every use of a type's …Locked method by a function of another type
// (see CrossLocked).
func NoCrossLocked(t testing.TB, dir string) {
	t.Helper()
	p, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range p.CrossLocked() {
		t.Errorf("%s:%d: %s calls %s.%s: a …Locked method is its own type's, called with its own lock held", filepath.Base(o.Pos.Filename), o.Pos.Line, o.By, o.Type, o.Name)
	}
}
