//go:build linux

package main

// What an operator sees: fatal errors, the codex the daemon finds, the values its logs report.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/internal/health"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// A fatal error after the logger exists is reported once, as a JSON log line at error level:
// not a JSON line and then the same text again on stderr. The error for a missing codex names
// every way to give the daemon one.
func TestE2EFatalErrorPrintedOnce(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true})
	d := e.launch("--codex-bin", "/nonexistent/codex")
	d.waitFailed()
	d.checkLog()
	out := d.log()
	if n := strings.Count(out, "/nonexistent/codex"); n != 1 {
		t.Errorf("the error is printed %d times, want once:\n%s", n, out)
	}
	lines := d.logsWith("daemon stopped with an error")
	if len(lines) != 1 || lines[0].str("level") != "error" || !strings.Contains(lines[0].str("error"), "/nonexistent/codex") {
		t.Fatalf("want one error-level line naming the binary; log:\n%s", out)
	}
}

// With no --codex-bin, no CODEX_BIN, nothing beside the executable and no codex in PATH, the
// error says how to give the daemon a codex: --codex-bin, CODEX_BIN, make -s codex-bin.
func TestE2ENoCodexNamesEveryWayToGiveOne(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true, Env: []string{"PATH=" + t.TempDir()}})
	d := e.launch("--codex-bin=")
	d.waitFailed()
	lines := d.logsWith("daemon stopped with an error")
	if len(lines) != 1 {
		t.Fatalf("want one error line; log:\n%s", d.log())
	}
	msg := lines[0].str("error")
	for _, want := range []string{"no codex in PATH", "--codex-bin", "CODEX_BIN", "make -s codex-bin"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not name %s", msg, want)
		}
	}
}

// codex_home in the start-up log is the directory codex uses: $HOME/.codex when CODEX_HOME is
// unset or empty, not an empty string.
func TestE2ECodexHomeLoggedAsEffective(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	e := newE2E(t, e2eConfig{Local: true, Env: []string{"HOME=" + home, "CODEX_HOME="}})
	if err := os.Mkdir(filepath.Join(home, ".codex"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := e.mock.WriteCodexHome(filepath.Join(home, ".codex")); err != nil {
		t.Fatal(err)
	}
	d := e.start()
	lines := d.logsWith("codex checked")
	if len(lines) != 1 || lines[0].str("codex_home") != filepath.Join(home, ".codex") {
		t.Errorf("codex checked lines %v, want codex_home %s", lines, filepath.Join(home, ".codex"))
	}
	newLocalClient(t, d).send("alpha", "hello")
	started := d.logsWith("codex app-server started")
	if len(started) == 0 {
		t.Fatal("no codex app-server started line")
	}
	for _, l := range started {
		if l.str("codex_home") != filepath.Join(home, ".codex") {
			t.Errorf("%v: want codex_home %s", l, filepath.Join(home, ".codex"))
		}
	}
	d.stop(stopTimeout)
}

// getJSON GETs url and decodes the JSON answer into v, returning the status code.
func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: HTTP %d, not JSON: %s", url, resp.StatusCode, b)
	}
	return resp.StatusCode
}

// runStatus runs `supervisor status args...` in-process and returns its exit code and stdout.
func runStatus(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := runMain(context.Background(), append([]string{"status"}, args...), noEnv, &out, &errOut)
	return code, out.String() + errOut.String()
}

// A daemon logged in and serving is ready: /readyz on the local inbox answers 200 with its
// four checks passed, and `status --health` / `status --ready` (over the control socket, no
// token or address needed) exit 0. Once SIGTERM starts the drain it is live but not ready.
func TestE2EReadyWhenServing(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true})
	d := e.start("--drain-timeout", "30s")
	base := "http://" + d.ready.Daemon.Listen
	var live map[string]string
	if code := getJSON(t, base+"/healthz", &live); code != http.StatusOK || live["status"] != "ok" {
		t.Errorf("/healthz: %d %v", code, live)
	}
	var rep health.Report
	if code := getJSON(t, base+"/readyz", &rep); code != http.StatusOK || !rep.Ready() {
		t.Fatalf("/readyz: %d %+v", code, rep)
	}
	var names []string
	for _, c := range rep.Checks {
		names = append(names, c.Name)
	}
	if strings.Join(names, ",") != "inbox,state_dir,codex,model,platform,codex_login" {
		t.Errorf("checks %v", names)
	}
	if code, out := runStatus(t, "--state-dir", e.stateDir, "--health"); code != 0 || out != "ok\n" {
		t.Errorf("status --health: exit %d, %q", code, out)
	}
	if code, out := runStatus(t, "--state-dir", e.stateDir, "--ready"); code != 0 || out != "ready\n" {
		t.Errorf("status --ready: exit %d, %q", code, out)
	}

	// A turn that hangs keeps the drain going while the probes are asked.
	c := newLocalClient(t, d)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Not c.post: the daemon cuts this request off at the stop, which post would report.
		resp, err := c.hc.Post(c.base+"/v1/chats/alpha/messages", "application/json", strings.NewReader(`{"text": "`+mockmodel.KeywordHang+`"}`))
		if err == nil {
			resp.Body.Close()
		}
	}()
	ctx, cancel := d.waitCtx()
	defer cancel()
	if err := e.mock.WaitHung(ctx, 1); err != nil {
		t.Fatal(err)
	}
	d.signal(syscall.SIGTERM)
	for {
		code, out := runStatus(t, "--state-dir", e.stateDir, "--ready")
		if code == 1 && strings.Contains(out, "inbox: draining") {
			break
		}
		if code != 0 {
			t.Fatalf("status --ready while draining: exit %d, %q", code, out)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("still ready %s after SIGTERM", waitTimeout)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if code, out := runStatus(t, "--state-dir", e.stateDir, "--health"); code != 0 {
		t.Errorf("status --health while draining: exit %d, %q", code, out)
	}
	d.signal(syscall.SIGTERM)
	<-done
	d.waitExit(stopTimeout)
	if code, _ := runStatus(t, "--state-dir", e.stateDir, "--health"); code != 3 {
		t.Errorf("status --health with no daemon: exit %d, want 3", code)
	}
}

// A daemon whose codex is not logged in is live but not ready: /readyz answers 503 naming the
// login and the CODEX_HOME to log in with, and `status --ready` exits 1 with the same reason.
func TestE2ENotReadyWhenNotLoggedIn(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true})
	if err := os.Remove(filepath.Join(e.codexHome, "config.toml")); err != nil {
		t.Fatal(err)
	}
	d := e.start()
	var rep health.Report
	code := getJSON(t, "http://"+d.ready.Daemon.Listen+"/readyz", &rep)
	if code != http.StatusServiceUnavailable || rep.Ready() || !strings.Contains(rep.Reason, "codex_login: codex is not logged in") ||
		!strings.Contains(rep.Reason, "CODEX_HOME="+e.codexHome) {
		t.Errorf("/readyz: %d %+v", code, rep)
	}
	if code, out := runStatus(t, "--state-dir", e.stateDir, "--ready"); code != 1 || !strings.Contains(out, "not ready: codex_login: codex is not logged in") {
		t.Errorf("status --ready: exit %d, %q", code, out)
	}
	d.stop(stopTimeout)
}
