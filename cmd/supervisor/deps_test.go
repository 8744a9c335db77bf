package main

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestBinaryLinksNoTestCode pins that the production binary links no test doubles: no package
// of this module named like a test helper (appservertest, moleculetest, …) and not the standard
// testing package, which such helpers drag in along with its flags. `supervisor demo` runs on
// package mockmodel, which is meant for production use.
func TestBinaryLinksNoTestCode(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{.Standard}}", ".").Output()
	if err != nil {
		var stderr []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -deps: %v\n%s", err, stderr)
	}
	const module = "github.com/molecule-ai/codex-warm/"
	var deps int
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, standard, _ := strings.Cut(line, " ")
		deps++
		switch {
		case path == "testing" && standard == "true":
			t.Errorf("the binary links the standard package testing")
		case strings.HasPrefix(path, module) && strings.HasSuffix(path, "test"):
			t.Errorf("the binary links the test package %s", path)
		}
	}
	if deps < 10 {
		t.Fatalf("go list -deps listed %d packages, expected the whole import graph:\n%s", deps, out)
	}
}
