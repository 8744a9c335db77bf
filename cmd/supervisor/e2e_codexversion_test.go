//go:build linux

package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/internal/codexversion"
	"github.com/molecule-ai/codex-warm/internal/exectest"
)

// A codex outside the tested range is served, and run's log says, once and as a warning, which
// way it lies, what that risks and what to do; a codex within the range (the one under test,
// whichever it is, when the range holds it) gets no such line.
func TestE2ECodexOutsideTheTestedRange(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true})
	const newer = "999.0.0"
	// The real codex, saying it is a release nobody tested.
	wrapper := filepath.Join(e.root, "newer-codex")
	script := fmt.Sprintf("#!/bin/sh\n[ \"$1\" = --version ] && { echo codex-cli %s; exit 0; }\nexec %q \"$@\"\n", newer, e.codexBin)
	if err := exectest.WriteExecutable(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	underTest := e.codexBin
	e.codexBin = wrapper
	d := e.start()
	c := newLocalClient(t, d)
	if r := c.send("alpha", "hello"); r.Text != "reply #1: hello" {
		t.Fatalf("reply: %+v", r)
	}
	w := d.logsWith("codex-cli " + newer + " is newer than the versions this release is tested with")
	if len(w) != 1 || w[0].str("level") != "warn" || !strings.Contains(w[0].str("msg"), codexversion.Oldest+" to "+codexversion.Newest) ||
		!strings.Contains(w[0].str("fix"), "make compat CODEX_VERSION="+newer) {
		t.Errorf("want one warning naming the range and the fix, got %v\n%s", w, d.logTail(4000))
	}
	if v := d.status().Daemon.CodexVersion; v != newer {
		t.Errorf("status codex version %q, want %q", v, newer)
	}

	e.codexBin = underTest
	d.stop(readyTimeout)
	d2 := e.start()
	v := d2.status().Daemon.CodexVersion
	if where, err := codexversion.Range(v); err == nil && where == 0 {
		if w := d2.logsWith("than the versions this release is tested with"); len(w) > 0 {
			t.Errorf("codex %s within the range, yet: %v", v, w)
		}
	}
}
