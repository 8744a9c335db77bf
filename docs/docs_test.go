// Package docs holds the project's documentation. Its test keeps the front door honest: the
// README stays short, every page here is reachable from it, and no link in the README or in
// these pages leads nowhere, to a file or to a heading.
package docs

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// maxReadmeLines is the README's budget: what the project is, the quick start, running it for
// real and the map of docs/ (issue 32). Everything else belongs on a page here.
const maxReadmeLines = 300

func TestReadmeIsShort(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > maxReadmeLines {
		t.Errorf("README.md has %d lines, over its budget of %d: move the detail to a page in docs/ and link it", n, maxReadmeLines)
	}
}

func TestEveryPageIsLinkedFromReadme(t *testing.T) {
	links := linksOf(t, "../README.md")
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("no pages in docs/")
	}
	for _, page := range pages {
		want := "docs/" + page
		if !slices.ContainsFunc(links, func(l link) bool { return l.path == want }) {
			t.Errorf("README.md does not link %s", want)
		}
	}
}

func TestRelativeLinksResolve(t *testing.T) {
	files := []string{"../README.md"}
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, pages...)
	anchors := map[string][]string{} // markdown file (as opened from here) → its heading anchors
	anchorsOf := func(file string) []string {
		if a, ok := anchors[file]; ok {
			return a
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		anchors[file] = headingAnchors(string(b))
		return anchors[file]
	}
	for _, file := range files {
		for _, l := range linksOf(t, file) {
			target := file // a bare #anchor points into the file itself
			if l.path != "" {
				target = filepath.Join(filepath.Dir(file), l.path)
				if _, err := os.Stat(target); err != nil {
					t.Errorf("%s:%d: link %q: %v", file, l.line, l.raw, err)
					continue
				}
			}
			if l.anchor == "" || !strings.HasSuffix(target, ".md") {
				continue
			}
			if !slices.Contains(anchorsOf(target), l.anchor) {
				t.Errorf("%s:%d: link %q: %s has no heading with the anchor #%s", file, l.line, l.raw, target, l.anchor)
			}
		}
	}
}

// TestEveryFlagIsDocumented keeps docs/configuration.md whole: every flag the binary defines, of
// any command, is named there as `--name`, and every environment variable a flag falls back to
// as `NAME`. The flags are read from the source of cmd/supervisor (the commands' own flags) and
// of package daemon (run's and doctor's), so a new flag fails here until its row is written.
func TestEveryFlagIsDocumented(t *testing.T) {
	b, err := os.ReadFile("configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	var flags, envs []string
	for _, dir := range []string{"../cmd/supervisor", "../internal/daemon"} {
		f, e := daemonFlags(t, dir)
		flags, envs = append(flags, f...), append(envs, e...)
	}
	// A few dozen flags are defined today; far fewer means they moved out of these packages and
	// this test no longer sees them.
	if len(flags) < 40 {
		t.Fatalf("found only %d flags in cmd/supervisor and daemon (%v): point daemonFlags at where they are defined now", len(flags), flags)
	}
	for _, f := range flags {
		if !strings.Contains(doc, "`--"+f+"`") {
			t.Errorf("configuration.md does not name the flag `--%s`", f)
		}
	}
	for _, e := range envs {
		if !strings.Contains(doc, "`"+e+"`") {
			t.Errorf("configuration.md does not name the environment variable `%s`", e)
		}
	}
}

// flagFuncs are the calls that define a flag: the flag package's, and package daemon's envFlags
// helpers (str, int, bool, dur), whose string after the name is the variable it falls back to.
var flagFuncs = map[string]bool{
	"String": true, "StringVar": true, "Int": true, "IntVar": true, "Int64": true, "Int64Var": true,
	"Uint": true, "UintVar": true, "Float64": true, "Float64Var": true, "Bool": true, "BoolVar": true,
	"Duration": true, "DurationVar": true, "Var": true, "Func": true, "BoolFunc": true, "TextVar": true,
}
var envFlagFuncs = map[string]bool{"str": true, "int": true, "bool": true, "dur": true}

// onFlagSet says whether a call's receiver is a flag set as the two packages name them: fs, e (an
// envFlags) or e.fs. It keeps zap.String("dir", …) and the like out.
func onFlagSet(x ast.Expr) bool {
	switch x := x.(type) {
	case *ast.Ident:
		return x.Name == "fs" || x.Name == "e"
	case *ast.SelectorExpr:
		return x.Sel.Name == "fs"
	}
	return false
}

// daemonFlags returns the names of the flags the non-test Go files of dir define, and the
// environment variables the envFlags helpers bind them to.
func daemonFlags(t *testing.T, dir string) (flags, envs []string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || !flagFuncs[sel.Sel.Name] && !envFlagFuncs[sel.Sel.Name] || !onFlagSet(sel.X) {
				return true
			}
			var lits []string
			for _, a := range call.Args {
				if lit, ok := a.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					s, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatalf("%s: %v", fset.Position(lit.Pos()), err)
					}
					lits = append(lits, s)
				}
			}
			if len(lits) == 0 {
				return true // a helper passing its parameters on (envFlags itself)
			}
			if !slices.Contains(flags, lits[0]) {
				flags = append(flags, lits[0])
			}
			if envFlagFuncs[sel.Sel.Name] && len(lits) > 1 && !slices.Contains(envs, lits[1]) {
				envs = append(envs, lits[1])
			}
			return true
		})
	}
	return flags, envs
}

// TestHeadingAnchors pins the anchor rule headingAnchors follows (GitHub's): lower case, every
// character but letters, digits, spaces, '-' and '_' dropped, spaces as '-', and a repeated
// heading numbered.
func TestHeadingAnchors(t *testing.T) {
	got := headingAnchors("# Title\n## A message that arrives while a turn runs (`--busy`)\n" +
		"```sh\n# not a heading\n```\n## `supervisor status`\n## Title\n### A2A sends (`POST /workspaces/{peer}/a2a`, `a2a_proxy.go`)\n")
	want := []string{"title", "a-message-that-arrives-while-a-turn-runs---busy", "supervisor-status", "title-1",
		"a2a-sends-post-workspacespeera2a-a2a_proxygo"}
	if !slices.Equal(got, want) {
		t.Errorf("headingAnchors:\ngot  %q\nwant %q", got, want)
	}
}

// link is one markdown link to something in the repository: its path relative to the file that
// holds it (empty for a link into the same file), and its anchor without the '#'.
type link struct {
	raw          string
	path, anchor string
	line         int
}

var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// linksOf returns the relative links of a markdown file, outside code blocks and code spans.
// Links with a scheme (https:, mailto:) lead outside the repository and are left alone.
func linksOf(t *testing.T, file string) []link {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var links []link
	for i, text := range proseLines(string(b)) {
		for _, m := range linkRE.FindAllStringSubmatch(stripCodeSpans(text), -1) {
			raw := m[1]
			if strings.Contains(raw, "://") || strings.HasPrefix(raw, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(raw, "#")
			links = append(links, link{raw: raw, path: path, anchor: anchor, line: i + 1})
		}
	}
	return links
}

// proseLines returns the file's lines with those inside fenced code blocks blanked, so line
// numbers stay those of the file.
func proseLines(text string) []string {
	lines := strings.Split(text, "\n")
	fenced := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			lines[i] = ""
			continue
		}
		if fenced {
			lines[i] = ""
		}
	}
	return lines
}

var codeSpanRE = regexp.MustCompile("`[^`]*`")

func stripCodeSpans(line string) string { return codeSpanRE.ReplaceAllString(line, "``") }

// headingAnchors returns the anchors of a markdown file's headings as GitHub makes them.
func headingAnchors(text string) []string {
	var anchors []string
	seen := map[string]int{}
	for _, l := range proseLines(text) {
		hashes := len(l) - len(strings.TrimLeft(l, "#"))
		if hashes == 0 || hashes > 6 || !strings.HasPrefix(l[hashes:], " ") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(l[hashes:])) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			seen[a] = n + 1
			a = fmt.Sprintf("%s-%d", a, n)
		} else {
			seen[a] = 1
		}
		anchors = append(anchors, a)
	}
	return anchors
}
