package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/appserver/appservertest"
)

// leanRun is what the model received from one daemon: a chat's first two requests, normalised,
// and the environment and -c arguments of the chat's child.
type leanRun struct {
	requests []string
	env      []string
	args     []string
}

// runLean starts a daemon without spares, with SSL_CERT_FILE a bundle inside SSL_CERT_DIR, and
// extra config.toml lines, and has one chat send two messages.
func runLean(t *testing.T, toml string, flags ...string) leanRun {
	t.Helper()
	certs := t.TempDir()
	bundle := filepath.Join(certs, "bundle.crt")
	if err := os.WriteFile(bundle, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e := newE2E(t, e2eConfig{Local: true, Env: []string{"SSL_CERT_DIR=" + certs, "SSL_CERT_FILE=" + bundle}})
	if toml != "" {
		f, err := os.OpenFile(filepath.Join(e.codexHome, "config.toml"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.WriteString("\n" + toml + "\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	d := e.start(append([]string{"--spares", "0"}, flags...)...)
	c := newLocalClient(t, d)
	r := c.send("alpha", "hello")
	if r2 := c.send("alpha", "again"); r2.Text != "reply #2: again" {
		t.Fatalf("second reply %+v", r2)
	}
	pid := childPID(d.status(), "alpha")
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	run := leanRun{env: strings.Split(string(bytes.TrimRight(environ, "\x00")), "\x00")}
	for _, l := range d.logsWith("codex app-server started") {
		// With shared children (make test-shared) the client's line names no chat: the pid
		// finds it. The args are a list; a field holding a secret would be written redacted as
		// one string, "[-c k=v app-server]".
		if l.str("chat_key") != "alpha" && l["pid"] != float64(pid) {
			continue
		}
		switch args := l["args"].(type) {
		case []any:
			for _, a := range args {
				run.args = append(run.args, a.(string))
			}
		case string:
			run.args = append(run.args, strings.Fields(strings.Trim(args, "[]"))...)
		}
	}
	d.stop(stopTimeout)
	d.checkLog()
	for _, req := range e.mock.Requests() {
		s, err := appservertest.NormaliseRequest(req.Raw, map[string]string{
			r.ThreadID: "<thread>", e.codexHome: "<codex-home>", e.workDir: "<cwd>"})
		if err != nil {
			t.Fatal(err)
		}
		run.requests = append(run.requests, s)
	}
	if len(run.requests) != 2 {
		t.Fatalf("the model saw %d requests; want 2", len(run.requests))
	}
	return run
}

// The lean settings change nothing the model receives: a chat's requests are byte-equal (after
// normalising ids) with and without them. The child runs with both knobs and without
// SSL_CERT_DIR, or, with --lean-children=false, with neither knob and with SSL_CERT_DIR.
func TestE2ELeanChildrenChangeNothingTheModelSees(t *testing.T) {
	t.Parallel()
	plain := runLean(t, "", "--lean-children=false")
	lean := runLean(t, "")
	for i := range plain.requests {
		if plain.requests[i] != lean.requests[i] {
			t.Errorf("request %d differs with the lean settings (a: plain, b: lean) %s", i+1,
				appservertest.FirstDifference(plain.requests[i], lean.requests[i]))
		}
	}
	knobs := []string{"features.skill_search=false", "feedback.enabled=false"}
	for _, k := range knobs {
		if !slices.Contains(lean.args, k) || slices.Contains(plain.args, k) {
			t.Errorf("-c %s: lean child args %v, plain child args %v; want it in the lean child's only", k, lean.args, plain.args)
		}
	}
	if lookupEnv(lean.env, "SSL_CERT_DIR") != "" || lookupEnv(plain.env, "SSL_CERT_DIR") == "" {
		t.Errorf("SSL_CERT_DIR: lean child %q, plain child %q; want it dropped from the lean child only",
			lookupEnv(lean.env, "SSL_CERT_DIR"), lookupEnv(plain.env, "SSL_CERT_DIR"))
	}
	if lookupEnv(lean.env, "SSL_CERT_FILE") == "" {
		t.Error("SSL_CERT_FILE was dropped too")
	}
}

// An operator's own setting of a lean key wins, whether in config.toml or a --codex-config flag:
// the daemon does not pass its own value for that key.
func TestE2ELeanChildrenKeepOperatorSettings(t *testing.T) {
	t.Parallel()
	run := runLean(t, "[feedback]\nenabled = true", "--codex-config", "features.skill_search=true")
	if slices.Contains(run.args, "feedback.enabled=false") || slices.Contains(run.args, "features.skill_search=false") {
		t.Errorf("child args %v override the operator's settings", run.args)
	}
	if !slices.Contains(run.args, "features.skill_search=true") {
		t.Errorf("child args %v lack the operator's -c features.skill_search=true", run.args)
	}
}
