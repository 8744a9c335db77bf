package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// `supervisor archive` with nothing to do says so and changes nothing.
func TestArchiveCmdNeedsAPolicy(t *testing.T) {
	var out bytes.Buffer
	if code := runMain(context.Background(), []string{"archive", "--state-dir", t.TempDir()}, func(string) string { return "" }, &out, &out); code != 1 ||
		!strings.Contains(out.String(), "nothing to do") {
		t.Fatalf("exit %d: %s", code, out.String())
	}
}
