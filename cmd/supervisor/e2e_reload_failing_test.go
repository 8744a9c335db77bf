//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/internal/exectest"
)

// A codex that the new binary cannot run is caught before the exec when it is broken or
// missing (the preflight runs the new binary's start checks with the daemon's flags), and,
// when it breaks between the preflight and the new image's start, the new image gives
// everything back to the previous binary instead of dying with the children. Each time the
// daemon serves on with its pid and warm child, and the status says why.
func TestE2EReloadNewImageCannotRun(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true})
	installReloadable(t, e)
	// codex behind a script that breaks its --version on demand.
	dir := filepath.Join(e.root, "codexdir")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(dir, "codex")
	script := "#!/bin/sh\n" +
		"if [ \"$1\" = \"--version\" ]; then\n" +
		"  if [ -e " + dir + "/broken ]; then echo 'codex is broken' >&2; exit 1; fi\n" +
		"  if [ -e " + dir + "/fail-second ]; then\n" +
		"    if [ -e " + dir + "/passed ]; then echo 'codex broke after the preflight' >&2; exit 1; fi\n" +
		"    touch " + dir + "/passed\n" +
		"  fi\n" +
		"fi\n" +
		"exec " + e.codexBin + " \"$@\"\n"
	if err := exectest.WriteExecutable(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	e.codexBin = wrapper
	d := e.start()
	c := newLocalClient(t, d)
	if r := c.send("warm", "first message"); r.Status != "completed" {
		t.Fatalf("first reply: %+v", r)
	}
	key := chatChildren(d.status())[0].ChatKey
	child := procOf(t, childPID(d.status(), key))
	touch := func(name string) {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, outcome, says string
		arrange, undo       func()
	}{
		{"broken codex", reloadRefused, "preflight: check codex",
			func() { touch("broken") }, func() { _ = os.Remove(filepath.Join(dir, "broken")) }},
		{"missing codex", reloadRefused, "find codex",
			func() { _ = os.Rename(wrapper, wrapper+".away") }, func() { _ = os.Rename(wrapper+".away", wrapper) }},
		{"codex broken after the preflight", reloadFailed, "its start checks failed: check codex",
			func() { touch("fail-second") }, func() {
				_ = os.Remove(filepath.Join(dir, "fail-second"))
				_ = os.Remove(filepath.Join(dir, "passed"))
			}},
	} {
		installBin(t, e.bin)
		tc.arrange()
		code, out := e.reloadCmd()
		tc.undo()
		if code == 0 || !strings.Contains(out, tc.says) {
			t.Fatalf("%s: reload exit %d, want a failure saying %q:\n%s\n%s", tc.name, code, tc.says, out, d.logTail(3000))
		}
		doc := d.status()
		if r := doc.Daemon.LastReload; doc.Daemon.PID != d.pid || r.Outcome != tc.outcome || !strings.Contains(r.Error, tc.says) {
			t.Fatalf("%s: pid %d, last reload %+v", tc.name, doc.Daemon.PID, r)
		}
		if procOf(t, childPID(doc, key)) != child {
			t.Fatalf("%s: the chat's child changed", tc.name)
		}
		if r := c.send("warm", "after "+tc.name); r.Status != "completed" || !strings.Contains(r.Text, tc.name) {
			t.Fatalf("%s: reply %+v", tc.name, r)
		}
	}
	installBin(t, e.bin)
	if code, out := e.reloadCmd(); code != 0 {
		t.Fatalf("a good reload after the failures: exit %d: %s", code, out)
	}
	d.stop(stopTimeout)
}
