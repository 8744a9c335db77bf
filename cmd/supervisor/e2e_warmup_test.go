package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/appserver/appservertest"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// spareChat is what one daemon left after a new chat's first message ran on its spare.
type spareChat struct {
	e       *e2e
	thread  string
	request string   // the model's first request, normalised
	warmUps []string // codex's own connection warm-ups (generate:false) before the message, normalised
	files   []string // CODEX_HOME after the daemon stopped, normalised
}

// runSpareChat starts a daemon with one spare (warmed unless told otherwise by flags), sends a
// new chat's first message, lets the replacement spare get ready and stops the daemon. No model
// request may be made but the chat's own, and that one only after the message was sent: before
// it, all that reached the model is the spare's websocket and codex's own warm-up of it
// (generate:false, no user input). The chat's request comes on that websocket, opened before
// the message.
func runSpareChat(t *testing.T, flags ...string) spareChat {
	t.Helper()
	e := newE2E(t, e2eConfig{Local: true})
	d := e.start(append([]string{"--spares", "1"}, flags...)...)
	c := newLocalClient(t, d)
	var spare supervisor.ChildStatus
	d.waitUntil("a spare", func() bool {
		sp := spares(d.status())
		if len(sp) == 1 {
			spare = sp[0]
		}
		return len(sp) == 1
	})
	// codex opens the spare thread's websocket at thread/start and warms it up on its own; a
	// spare may be ready a moment before.
	d.waitUntil("the spare's websocket warmed up", func() bool { return len(e.mock.Warmups()) == 1 })
	sent := time.Now()
	before := e.mock.Timeline()
	if n := e.mock.RequestCount(); n != 0 {
		t.Fatalf("the model saw %d requests before any message; want 0", n)
	}
	warmUps := checkOnlyWarmUps(t, e, before, map[string]string{spare.ThreadID: "<thread>"})
	r := c.send("alpha", "hello")
	if r.Text != "reply #1: hello" || r.ThreadID != spare.ThreadID {
		t.Fatalf("first reply %+v; want it on the spare's thread %s", r, spare.ThreadID)
	}
	d.waitUntil("a replacement spare", func() bool {
		sp := spares(d.status())
		// A new thread: in a new child, or, shared (make test-shared), in the same one.
		return len(sp) == 1 && sp[0].ThreadID != spare.ThreadID
	})
	d.stop(stopTimeout)
	d.checkLog()
	reqs := e.mock.Requests()
	if len(reqs) != 1 {
		t.Fatalf("the model saw %d requests; want 1, the chat's", len(reqs))
	}
	checkRequestOnOpenConn(t, e.mock.Timeline(), reqs[0], sent)
	req, err := appservertest.NormaliseRequest(reqs[0].Raw, map[string]string{
		r.ThreadID: "<thread>", e.codexHome: "<codex-home>", e.workDir: "<cwd>"})
	if err != nil {
		t.Fatal(err)
	}
	files, err := appservertest.HomeFiles(e.codexHome, map[string]string{r.ThreadID: "<thread>"})
	if err != nil {
		t.Fatal(err)
	}
	return spareChat{e: e, thread: r.ThreadID, request: req, warmUps: warmUps, files: files}
}

// checkOnlyWarmUps checks that the model's timeline before a chat's message holds connections,
// websocket upgrades and codex's warm-ups only (no request), that no warm-up carries a user
// message, and returns the warm-ups normalised.
func checkOnlyWarmUps(t *testing.T, e *e2e, before []mockmodel.Event, literals map[string]string) []string {
	t.Helper()
	for _, ev := range before {
		if ev.Kind != mockmodel.EventConnect && ev.Kind != mockmodel.EventUpgrade && ev.Kind != mockmodel.EventWarmup {
			t.Errorf("before the chat's message the model saw %s (connection %d, request %d); want connections and warm-ups only",
				ev.Kind, ev.Conn, ev.Request)
		}
	}
	literals[e.codexHome], literals[e.workDir] = "<codex-home>", "<cwd>"
	var out []string
	for _, w := range e.mock.Warmups() {
		if len(w.UserTexts) != 0 {
			t.Errorf("warm-up %d carries user messages %q", w.N, w.UserTexts)
		}
		n, err := appservertest.NormaliseRequest(w.Raw, literals)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}

// checkRequestOnOpenConn checks that req, the chat's first request, came after sent, on a
// connection the model accepted before sent: the first message paid no connection.
func checkRequestOnOpenConn(t *testing.T, timeline []mockmodel.Event, req mockmodel.Request, sent time.Time) {
	t.Helper()
	for _, ev := range timeline {
		switch {
		case ev.Kind == mockmodel.EventRequest && ev.Request == req.N && ev.At.Before(sent):
			t.Errorf("the chat's request reached the model at %v, before the message was sent at %v", ev.At, sent)
		case ev.Conn == req.Conn && (ev.Kind == mockmodel.EventConnect || ev.Kind == mockmodel.EventUpgrade) && !ev.At.Before(sent):
			t.Errorf("the chat's request came on connection %d, whose %s came after the message was sent", req.Conn, ev.Kind)
		}
	}
	if req.Conn == 0 {
		t.Errorf("the chat's request came on no connection the model numbered")
	}
}

// A warmed spare serves a new chat exactly as a cold one does, at one thread a child and with
// shared children: its warm-up and the replacement spare's reach no model (before the message
// the mock sees the spare's websocket and codex's own warm-up of it, the same as a cold spare's;
// after, the chat's request only), the model's first request is the same byte for byte (after
// appservertest.NormaliseRequest), and CODEX_HOME holds the same files but the name index, whose
// last word on the chat's thread is the chat key. The spare that was never taken leaves no
// thread behind.
func TestE2EWarmSpareChangesNothingTheModelSees(t *testing.T) {
	t.Parallel()
	for _, n := range []string{"1", "4"} {
		t.Run("threads-per-child="+n, func(t *testing.T) {
			t.Parallel()
			cold := runSpareChat(t, "--warm-spares=false", "--threads-per-child", n)
			warm := runSpareChat(t, "--threads-per-child", n)
			checkWarmSpareChat(t, cold, warm)
		})
	}
}

// checkWarmSpareChat compares what a warmed spare's chat left with what a cold one's did.
func checkWarmSpareChat(t *testing.T, cold, warm spareChat) {
	t.Helper()
	if cold.request != warm.request {
		t.Errorf("the first request differs with a warmed spare (a: cold, b: warm) %s",
			appservertest.FirstDifference(cold.request, warm.request))
	}
	if !slices.Equal(cold.warmUps, warm.warmUps) {
		t.Errorf("codex's warm-ups before the message differ with a warmed spare: %d against %d cold", len(warm.warmUps), len(cold.warmUps))
	}
	want := slices.Sorted(slices.Values(slices.Concat(cold.files, []string{"session_index.jsonl", "session_index.jsonl.lock"})))
	if !slices.Equal(warm.files, want) {
		t.Errorf("CODEX_HOME with a warmed spare:\n got %v\nwant %v", warm.files, want)
	}
	index, err := os.ReadFile(filepath.Join(warm.e.codexHome, "session_index.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(index)), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, warm.thread) || !strings.Contains(last, `"thread_name":"alpha"`) {
		t.Errorf("session_index.jsonl ends with %q; want thread %s named after its chat, alpha", last, warm.thread)
	}
}

// A chat with a stored thread that takes a warmed spare resumes its thread there, and the
// spare's own thread, written to disk by the warm-up, is deleted once the turn is over.
func TestE2EWarmSpareResumingChatLeavesNoThread(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true})
	d := e.start("--spares", "0")
	first := newLocalClient(t, d).send("alpha", "hello")
	d.stop(stopTimeout)

	d = e.start("--spares", "1")
	var spare supervisor.ChildStatus
	d.waitUntil("a spare", func() bool {
		sp := spares(d.status())
		if len(sp) == 1 {
			spare = sp[0]
		}
		return len(sp) == 1
	})
	if rollouts(t, e.codexHome, spare.ThreadID) != 1 {
		t.Fatalf("the warmed spare's thread %s is not on disk", spare.ThreadID)
	}
	r := newLocalClient(t, d).send("alpha", "again")
	if r.Text != "reply #2: again" || r.ThreadID != first.ThreadID {
		t.Fatalf("reply %+v; want the stored thread %s resumed", r, first.ThreadID)
	}
	if pid := childPID(d.status(), "alpha"); pid != spare.PID {
		t.Fatalf("alpha runs on pid %d; want the spare's %d", pid, spare.PID)
	}
	// Deleted once the turn is over, off the reply's path.
	d.waitUntil("the unused spare thread deleted", func() bool { return rollouts(t, e.codexHome, spare.ThreadID) == 0 })
	d.stop(stopTimeout)
	d.checkLog()
}

// rollouts counts thread's rollout files in home.
func rollouts(t *testing.T, home, thread string) int {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(home, "sessions", "*", "*", "*", "rollout-*-"+thread+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return len(m)
}
