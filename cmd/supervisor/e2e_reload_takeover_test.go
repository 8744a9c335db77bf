//go:build linux

package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// hangAtEnv makes a daemon started from this test binary hang (TestMain, daemon mode): the
// goroutine that writes the log line whose message it names blocks forever in the write, as on
// a stderr nobody reads. The variable is removed at once, so that an image the hung one
// re-executes (a give-back) does not hang too.
const hangAtEnv = "CODEX_WARM_E2E_HANG_AT"

// panicAtEnv is hangAtEnv with a panic in the write instead of a hang: an image that crashes.
const panicAtEnv = "CODEX_WARM_E2E_PANIC_AT"

// hangAt returns w, or, when hangAtEnv (panicAtEnv) is set, w behind a writer that never returns
// from (panics in) the write of that log line.
func hangAt(w io.Writer) io.Writer {
	for _, env := range []string{hangAtEnv, panicAtEnv} {
		if msg, ok := os.LookupEnv(env); ok {
			_ = os.Unsetenv(env)
			return &hangWriter{w: w, at: []byte(`"msg":"` + msg + `"`), never: make(chan struct{}), panics: env == panicAtEnv}
		}
	}
	return w
}

type hangWriter struct {
	w      io.Writer
	at     []byte
	never  chan struct{}
	panics bool
}

func (h *hangWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, h.at) {
		if h.panics {
			panic("the test's new image crashes at " + string(h.at))
		}
		<-h.never
	}
	return h.w.Write(p)
}

// holdMainEnv, with hangAtEnv, also keeps the daemon's main goroutine from serving the main
// thread (TestMain): a give-back cannot run there.
const holdMainEnv = "CODEX_WARM_E2E_HOLD_MAIN"

// holdMainThread reports (once) whether holdMainEnv asks TestMain to hold the main thread.
func holdMainThread() bool {
	_, ok := os.LookupEnv(holdMainEnv)
	_ = os.Unsetenv(holdMainEnv)
	return ok
}

// installHanging makes e.bin a new binary that passes the preflight and then hangs in its
// takeover where it logs msg: a script that runs a copy of this test binary with hangAtEnv set
// when it is run as the daemon (not for the preflight).
func installHanging(t *testing.T, e *e2e, msg string, holdMain bool) {
	t.Helper()
	installFaulty(t, e, hangAtEnv, msg, holdMain)
}

// installFaulty is installHanging with the fault env names (hangAtEnv or panicAtEnv).
func installFaulty(t *testing.T, e *e2e, env, msg string, holdMain bool) {
	t.Helper()
	hold := ""
	if holdMain {
		hold = holdMainEnv + "=1; export " + holdMainEnv + "; "
	}
	real := filepath.Join(e.root, "supervisor-hangs")
	installBin(t, real)
	script := "#!/bin/sh\n" +
		"if [ \"$1\" = run ]; then " + hold + env + "='" + msg + "'; export " + env + "; fi\n" +
		"exec " + real + " \"$@\"\n"
	installData(t, e.bin, []byte(script))
}

// reloadWait is e.reloadCmd with a bound on the wait for the outcome.
func (e *e2e) reloadWait(wait string) (int, string) {
	var out bytes.Buffer
	code := runMain(context.Background(), []string{"reload", "--state-dir", e.stateDir, "--wait", wait}, noEnv, &out, &out)
	return code, out.String()
}

// A new binary that passes the preflight and then hangs while it takes over (after its start
// checks, before it adopted anything) is not in charge for longer than --takeover-timeout: it
// gives everything back to the previous binary, which records the reload as failed with the
// reason and serves on with the same pid and the same children. A caller whose turn was
// crossing gets its reply once, from the child that ran it; an idle chat keeps its warm child;
// and a good binary then reloads.
func TestE2EReloadNewImageHangsGivesBack(t *testing.T) {
	t.Parallel()
	e, d, g := startReloadableHolding(t, "--drain-timeout", "60s", "--takeover-timeout", "8s")
	c := newLocalClient(t, d)
	if r := c.send("idle", "warm up"); r.Status != "completed" {
		t.Fatalf("idle chat: %+v", r)
	}
	running := c.sendAsync("k", "long running")
	d.waitUntil("the turn held by the model", func() bool { return g.holding() == 1 })
	pids := map[string]proc{}
	for _, ch := range chatChildren(d.status()) {
		pids[ch.ChatKey] = procOf(t, ch.PID)
	}
	if len(pids) != 2 {
		t.Fatalf("want 2 chat children, got %v", pids)
	}

	installHanging(t, e, "sessions loaded", false)
	code, out := e.reloadWait("90s")
	if code == 0 || !strings.Contains(out, "reload failed") || !strings.Contains(out, "did not take over within 8s") {
		t.Fatalf("reload into a hanging binary: exit %d:\n%s\n%s", code, out, d.logTail(3000))
	}
	doc := d.status()
	if r := doc.Daemon.LastReload; doc.Daemon.PID != d.pid || r.Outcome != reloadFailed || doc.Daemon.Reloads != 0 {
		t.Fatalf("after the give-back: pid %d (want %d), reloads %d, last %+v", doc.Daemon.PID, d.pid, doc.Daemon.Reloads, r)
	}
	for key, p := range pids {
		if got := childPID(doc, key); got != p.pid || procOf(t, got) != p {
			t.Fatalf("chat %s: child %d after the give-back, want the same process %d", key, got, p.pid)
		}
	}
	if n := len(d.logsWith("reload failed: the new binary gave everything back to this one")); n != 1 {
		t.Fatalf("%d give-back lines, want 1\n%s", n, d.logTail(3000))
	}
	g.release()
	if r := <-running; r.Status != "completed" || !strings.Contains(r.Text, "long running") {
		t.Fatalf("the crossing caller: %+v", r)
	}
	if n := len(e.requestsFor("long running")); n != 1 {
		t.Fatalf("the crossing message reached the model %d times, want once", n)
	}
	if r := c.send("idle", "after the give-back"); r.Status != "completed" {
		t.Fatalf("idle chat after the give-back: %+v", r)
	}
	installBin(t, e.bin)
	if code, out := e.reloadWait("90s"); code != 0 {
		t.Fatalf("a good reload after the give-back: exit %d: %s\n%s", code, out, d.logTail(3000))
	}
	if got := childPID(d.status(), "idle"); got != pids["idle"].pid {
		t.Fatalf("idle chat: child %d after the good reload, want %d", got, pids["idle"].pid)
	}
	d.stop(stopTimeout)
	d.checkLog()
}

// A new image whose main goroutine is deadlocked as well cannot give back on the main thread:
// it re-executes the previous binary from another thread, so the children die (their
// parent-death signal follows the main thread), but the daemon keeps its pid, its listener
// and the crossing caller's connection, records why, answers that caller (the turn ended with
// its child) and serves on with new children.
func TestE2EReloadNewImageHangsWithMainThread(t *testing.T) {
	t.Parallel()
	e, d, g := startReloadableHolding(t, "--drain-timeout", "60s", "--takeover-timeout", "8s")
	c := newLocalClient(t, d)
	if r := c.send("idle", "warm up"); r.Status != "completed" {
		t.Fatalf("idle chat: %+v", r)
	}
	running := c.sendAsync("k", "long running")
	d.waitUntil("the turn held by the model", func() bool { return g.holding() == 1 })
	var kids []proc
	for _, ch := range chatChildren(d.status()) {
		kids = append(kids, procOf(t, ch.PID))
	}
	installHanging(t, e, "sessions loaded", true)
	code, out := e.reloadWait("90s")
	if code == 0 || !strings.Contains(out, "did not take over within 8s") {
		t.Fatalf("reload into a hanging binary: exit %d:\n%s\n%s", code, out, d.logTail(3000))
	}
	if doc := d.status(); doc.Daemon.PID != d.pid || doc.Daemon.LastReload.Outcome != reloadFailed {
		t.Fatalf("after the give-back: pid %d (want %d), last %+v", doc.Daemon.PID, d.pid, doc.Daemon.LastReload)
	}
	waitGone(t, waitTimeout, kids...)
	r := <-running
	if r.Status == "completed" || r.Status == "" {
		t.Fatalf("the crossing caller, whose child died: %+v", r)
	}
	g.release()
	if r := c.send("idle", "after the give-back"); r.Status != "completed" {
		t.Fatalf("idle chat after the give-back: %+v", r)
	}
	if r := c.send("k", "again"); r.Status != "completed" {
		t.Fatalf("the crossing chat after the give-back: %+v", r)
	}
	d.stop(stopTimeout)
	d.checkLog()
}

// A new image that hangs after it began to take the children and listeners into use can no
// longer give them back: at --takeover-timeout it exits (status 1), its children end with it,
// so that a service manager starts the daemon again instead of a pid that serves nothing.
func TestE2EReloadNewImageHangsAfterCommitEnds(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true})
	installReloadable(t, e)
	d := e.start("--takeover-timeout", "8s")
	c := newLocalClient(t, d)
	if r := c.send("idle", "warm up"); r.Status != "completed" {
		t.Fatalf("idle chat: %+v", r)
	}
	child := procOf(t, childPID(d.status(), chatChildren(d.status())[0].ChatKey))
	installHanging(t, e, "local inbox listening", false)
	d.signal(syscall.SIGHUP)
	select {
	case <-d.exited:
	case <-time.After(waitTimeout):
		t.Fatalf("the hung image still runs %s after the reload:\n%s", waitTimeout, d.logTail(3000))
	}
	if d.waitErr == nil || killedBy(d.waitErr, syscall.SIGKILL) {
		t.Fatalf("daemon exit: %v, want exit status 1", d.waitErr)
	}
	if n := len(d.logsWith("reload: this image did not take over in time, after it began to; exiting")); n != 1 {
		t.Fatalf("%d lines saying why the image ended, want 1:\n%s", n, d.logTail(3000))
	}
	waitGone(t, waitTimeout, child)
	d.checkLog()
}

// A new binary that passes the preflight and then crashes (a panic) while it takes over, before
// it took anything into use, gives everything back as a hung one does, at once: the previous
// binary records why and serves on with the same children, and the crossing caller gets its
// reply once.
func TestE2EReloadNewImageCrashesGivesBack(t *testing.T) {
	t.Parallel()
	e, d, g := startReloadableHolding(t, "--drain-timeout", "60s")
	c := newLocalClient(t, d)
	running := c.sendAsync("k", "long running")
	d.waitUntil("the turn held by the model", func() bool { return g.holding() == 1 })
	child := procOf(t, childPID(d.status(), "k"))
	installFaulty(t, e, panicAtEnv, "sessions loaded", false)
	code, out := e.reloadWait("90s")
	if code == 0 || !strings.Contains(out, "it failed while taking over: it panicked") {
		t.Fatalf("reload into a crashing binary: exit %d:\n%s\n%s", code, out, d.logTail(3000))
	}
	doc := d.status()
	if doc.Daemon.LastReload.Outcome != reloadFailed || childPID(doc, "k") != child.pid || procOf(t, child.pid) != child {
		t.Fatalf("after the give-back: last %+v, child %d (want %d)", doc.Daemon.LastReload, childPID(doc, "k"), child.pid)
	}
	g.release()
	if r := <-running; r.Status != "completed" || !strings.Contains(r.Text, "long running") {
		t.Fatalf("the crossing caller: %+v", r)
	}
	if n := len(e.requestsFor("long running")); n != 1 {
		t.Fatalf("the crossing message reached the model %d times, want once", n)
	}
	d.stop(stopTimeout)
}
