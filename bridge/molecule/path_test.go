package molecule

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The way a canvas message takes, as docs/development.md lists it, is held to the issue's
// numbers: a reader follows it through at most 20 files and comes back to a file already left
// at most 8 times. The list names functions, so a rename or a move that the docs did not follow
// fails here too.
const (
	pathDoc        = "../../docs/development.md"
	pathSection    = "## A canvas message, from wake-up to ack"
	pathMaxFiles   = 20
	pathMaxReturns = 8
)

// pathStep is one line of the list: a function and the file it is said to be in.
type pathStep struct {
	file, fn string // fn is "name" or "Type.method"
}

// pathLine is a list line: "- `file.go: Type.method`: what it does".
var pathLine = regexp.MustCompile("^- `([A-Za-z0-9_]+\\.go): ([A-Za-z0-9_]+(?:\\.[A-Za-z0-9_]+)?)`")

// readPath reads the list of the section titled pathSection in the markdown file at path.
func readPath(path string) ([]pathStep, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var steps []pathStep
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == pathSection:
			in = true
		case in && strings.HasPrefix(line, "## "):
			return steps, sc.Err()
		case in:
			if m := pathLine.FindStringSubmatch(line); m != nil {
				steps = append(steps, pathStep{file: m[1], fn: m[2]})
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !in {
		return nil, fmt.Errorf("%s has no section %q", path, pathSection)
	}
	return steps, nil
}

// packageFuncs maps each function of the package's non-test files in dir, as "name" or
// "Type.method", to its file's base name.
func packageFuncs(dir string) (map[string]string, error) {
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	funcs := map[string]string{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			key := fd.Name.Name
			if fd.Recv != nil && len(fd.Recv.List) == 1 {
				key = receiverName(fd.Recv.List[0].Type) + "." + key
			}
			funcs[key] = filepath.Base(name)
		}
	}
	return funcs, nil
}

// receiverName is the type name of a receiver: T, *T, T[P] or *T[P].
func receiverName(e ast.Expr) string {
	for {
		switch t := e.(type) {
		case *ast.StarExpr:
			e = t.X
		case *ast.IndexExpr:
			e = t.X
		case *ast.IndexListExpr:
			e = t.X
		case *ast.Ident:
			return t.Name
		default:
			return fmt.Sprintf("%T", e)
		}
	}
}

// checkPath lists what is wrong with steps against funcs (packageFuncs): a function that does
// not exist or is in another file than listed, more than pathMaxFiles files, more than
// pathMaxReturns returns to a file already left. It also returns the counts.
func checkPath(steps []pathStep, funcs map[string]string) (problems []string, files, returns int) {
	if len(steps) == 0 {
		return []string{"the list is empty"}, 0, 0
	}
	seen := map[string]bool{}
	cur := ""
	for _, s := range steps {
		switch file, ok := funcs[s.fn]; {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s: %s does not exist in the package", s.file, s.fn))
		case file != s.file:
			problems = append(problems, fmt.Sprintf("%s: %s is in %s", s.file, s.fn, file))
		}
		if s.file == cur {
			continue
		}
		if seen[s.file] {
			returns++
		}
		seen[s.file] = true
		cur = s.file
	}
	files = len(seen)
	if files > pathMaxFiles {
		problems = append(problems, fmt.Sprintf("the way crosses %d files, at most %d", files, pathMaxFiles))
	}
	if returns > pathMaxReturns {
		problems = append(problems, fmt.Sprintf("the way goes back to a file it had left %d times, at most %d", returns, pathMaxReturns))
	}
	return problems, files, returns
}

func TestCanvasMessagePath(t *testing.T) {
	t.Parallel()
	steps, err := readPath(pathDoc)
	if err != nil {
		t.Fatal(err)
	}
	funcs, err := packageFuncs(".")
	if err != nil {
		t.Fatal(err)
	}
	problems, files, returns := checkPath(steps, funcs)
	for _, p := range problems {
		t.Errorf("docs/development.md, %q: %s", pathSection, p)
	}
	t.Logf("%d steps, %d files, %d returns to a file left before", len(steps), files, returns)
}

// The check fails on a planted function that does not exist, one listed in the wrong file, and
// a way that goes back and forth between two files too often or through too many files.
func TestCanvasMessagePathCheckFails(t *testing.T) {
	t.Parallel()
	funcs, err := packageFuncs(".")
	if err != nil {
		t.Fatal(err)
	}
	steps, err := readPath(pathDoc)
	if err != nil {
		t.Fatal(err)
	}
	planted := append(steps[:len(steps):len(steps)], pathStep{file: "feed.go", fn: "feed.noSuchStep"})
	if problems, _, _ := checkPath(planted, funcs); len(problems) != 1 || !strings.Contains(problems[0], "feed.noSuchStep does not exist") {
		t.Errorf("a planted missing function: problems %q", problems)
	}
	if problems, _, _ := checkPath([]pathStep{{file: "replies.go", fn: "answerer.answer"}}, funcs); len(problems) != 1 || !strings.Contains(problems[0], "is in moleculeanswer.go") {
		t.Errorf("a function in the wrong file: problems %q", problems)
	}
	// Two files in turn, one step more than the bound allows: each step after the first two is
	// a return.
	var pingpong []pathStep
	for i := range pathMaxReturns + 3 {
		s := pathStep{file: "feed.go", fn: "feed.ingest"}
		if i%2 == 1 {
			s = pathStep{file: "molecule.go", fn: "Inbox.handle"}
		}
		pingpong = append(pingpong, s)
	}
	if problems, _, returns := checkPath(pingpong, funcs); returns != pathMaxReturns+1 || len(problems) != 1 {
		t.Errorf("%d returns: problems %q", returns, problems)
	}
	var wide []pathStep
	for i := range pathMaxFiles + 1 {
		wide = append(wide, pathStep{file: fmt.Sprintf("f%d.go", i), fn: "feed.ingest"})
	}
	if problems, files, _ := checkPath(wide, funcs); files != pathMaxFiles+1 || !strings.Contains(strings.Join(problems, "\n"), "crosses 21 files") {
		t.Errorf("%d files: problems %q", files, problems)
	}
}
