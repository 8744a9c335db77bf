package daemon

import (
	"flag"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
)

// configSections returns the "###" sections of docs/configuration.md's part on run's flags,
// each heading with its text up to the next heading.
func configSections(t *testing.T, doc string) map[string]string {
	t.Helper()
	_, run, ok := strings.Cut(doc, "\n## `supervisor run` and `supervisor doctor`\n")
	if !ok {
		t.Fatal("configuration.md has no section on `supervisor run` and `supervisor doctor`")
	}
	run, _, _ = strings.Cut(run, "\n## ")
	sections := map[string]string{}
	for _, part := range strings.Split(run, "\n### ")[1:] {
		title, body, _ := strings.Cut(part, "\n")
		sections[title] = body
	}
	return sections
}

// TestFlagGroupsMatchConfigurationSections holds flagGroups and docs/configuration.md
// together: every group has its section there, every section is a group, and each flag a group
// registers has its row in that group's section.
func TestFlagGroupsMatchConfigurationSections(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	sections := configSections(t, string(b))
	var groups []string
	for _, g := range flagGroups() {
		groups = append(groups, g.section)
		body, ok := sections[g.section]
		if !ok {
			t.Errorf("configuration.md has no section %q for the flag group %s", g.section, g.section)
			continue
		}
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var c Config
		g.register(&envFlags{fs: fs, getenv: func(string) string { return "" }}, &c)
		n := 0
		fs.VisitAll(func(f *flag.Flag) {
			n++
			if !strings.Contains(body, "| `--"+f.Name+"` |") {
				t.Errorf("--%s (group %q) has no row in configuration.md's section %q", f.Name, g.section, g.section)
			}
		})
		if n == 0 {
			t.Errorf("group %q registers no flag", g.section)
		}
	}
	for title := range sections {
		if !slices.Contains(groups, title) {
			t.Errorf("configuration.md's section %q is no flag group (flagGroups: %v)", title, groups)
		}
	}
}

// TestConfigSectionsSeeAMisplacedRow plants a flag's row in the wrong section: the check above
// must see it missing from its own.
func TestConfigSectionsSeeAMisplacedRow(t *testing.T) {
	t.Parallel()
	doc := "# Configuration\n\n## `supervisor run` and `supervisor doctor`\n\n### A\n\n| `--x` | |\n\n### B\n\n| `--y` | |\n\n## The other commands\n\n### C\n"
	s := configSections(t, doc)
	if len(s) != 2 || !strings.Contains(s["A"], "| `--x` |") || strings.Contains(s["A"], "`--y`") || !strings.Contains(s["B"], "| `--y` |") {
		t.Fatalf("sections %q: want A holding only --x and B holding --y, nothing from the other commands", s)
	}
}
