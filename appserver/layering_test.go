package appserver

import (
	"go/build"
	"slices"
	"testing"
)

// The flow runs downward: the transport hands back what codex reported, and whoever needs a
// reply derives it (projector). An import of a package that digests turns, or of one above the
// transport, would turn that around.
func TestImportsRunDownward(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	const mod = "github.com/molecule-ai/codex-warm/"
	for _, up := range []string{"projector", "sessions", "supervisor", "bridge"} {
		if slices.Contains(pkg.Imports, mod+up) {
			t.Errorf("appserver imports %s%s", mod, up)
		}
	}
}
