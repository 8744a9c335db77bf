package main

import (
	"os"
	"regexp"
	"testing"
)

// The version doctor calls tested is the one the Makefile installs and the tests run.
func TestTestedCodexVersionIsTheMakefiles(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^CODEX_VERSION\s*\?=\s*(\S+)$`).FindSubmatch(b)
	if m == nil || string(m[1]) != testedCodexVersion {
		t.Fatalf("Makefile CODEX_VERSION %q, testedCodexVersion %q", m, testedCodexVersion)
	}
}
