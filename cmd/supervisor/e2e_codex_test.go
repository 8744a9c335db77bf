//go:build linux

package main

// What the daemon does at start-up about the codex it was given: a binary that is not codex is
// refused, and a codex that is not logged in (and has no model provider of its own) is reported
// and answered for at once.

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/local"
	"github.com/molecule-ai/codex-warm/internal/exectest"
)

// A --codex-bin that is not the codex CLI (/bin/true; a script that prints nothing) stops the
// daemon at start-up with an error that names the binary, before it serves anything.
func TestE2ENotCodexBinaryFailsAtStart(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true})
	script := filepath.Join(e.root, "silent-codex")
	if err := exectest.WriteExecutable(script, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, bin := range []string{"/bin/true", script} {
		d := e.launch("--codex-bin", bin)
		d.waitFailed()
		out := d.log()
		failed := d.logsWith("daemon stopped with an error")
		if len(failed) != 1 || !strings.Contains(failed[0].str("error"), bin) || !strings.Contains(failed[0].str("error"), "codex-cli") {
			t.Errorf("--codex-bin %s: output does not name the binary and what was expected of it:\n%s", bin, out)
		}
		if n := len(e.mock.Requests()); n != 0 {
			t.Errorf("--codex-bin %s: %d model requests", bin, n)
		}
	}
}

// codex with an empty CODEX_HOME (no login, no model provider of its own) needs an OpenAI login
// it does not have. The daemon says so loudly at start-up and in `supervisor status`, and
// answers a message at once with the `codex login` hint (502) instead of running a turn that
// cannot succeed.
func TestE2ENotLoggedInAnsweredAtOnce(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true})
	if err := os.Remove(filepath.Join(e.codexHome, "config.toml")); err != nil {
		t.Fatal(err)
	}
	// A turn that cannot finish must not be what answers: the deadline is far beyond the wait.
	d := e.start("--turn-timeout", "10m")
	if w := d.logsWith("codex is not logged in"); len(w) == 0 || w[0].str("level") != "error" {
		t.Errorf("start-up log has no loud not-logged-in line: %v", w)
	}

	code, body, _ := newLocalClient(t, d).post("alpha", `{"text": "hello"}`)
	var le local.ErrorReply
	if code != http.StatusBadGateway || json.Unmarshal(body, &le) != nil || !strings.Contains(le.Error, "codex login") {
		t.Errorf("POST: HTTP %d %s, want 502 with the codex login hint", code, body)
	}
	if n := len(e.mock.Requests()); n != 0 {
		t.Errorf("%d model requests, want none", n)
	}
	if started := d.logsWith("codex child ready"); len(started) != 0 {
		t.Errorf("a codex child was started for the message: %v", started)
	}

	doc := d.status()
	if a := doc.Daemon.CodexAuth; a == nil || a.State != CodexNotLoggedIn || !a.RequiresOpenAIAuth {
		t.Errorf("status codex_auth = %+v, want state %q", a, CodexNotLoggedIn)
	}
	var out, errOut bytes.Buffer
	if code := runMain(context.Background(), []string{"status", "--state-dir", e.stateDir}, noEnv, &out, &errOut); code != 0 {
		t.Fatalf("status exit %d: %s", code, errOut.String())
	}
	header, _, _ := strings.Cut(out.String(), "CHAT")
	if !strings.Contains(header, "WARNING: codex is not logged in") || !strings.Contains(header, "codex login") {
		t.Errorf("status table header lacks the not-logged-in warning:\n%s", out.String())
	}
	d.stop(stopTimeout)
}
