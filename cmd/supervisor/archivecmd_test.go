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

// A dry run with no daemon needs no codex: it starts no child. (It failed with "AppServer.Bin
// is required" where no codex was to be found.)
func TestArchiveCmdDryRunNeedsNoCodex(t *testing.T) {
	var out bytes.Buffer
	dir := t.TempDir()
	code := runMain(context.Background(), []string{"archive", "--state-dir", dir, "--idle-after", "30d", "--dry-run",
		"--codex-bin", dir + "/no-codex-here"}, func(string) string { return "" }, &out, &out)
	if code != 0 || !strings.Contains(out.String(), "0 archived, 0 deleted") {
		t.Fatalf("exit %d: %s", code, out.String())
	}
}
