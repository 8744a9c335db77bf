//go:build linux

package main

// Beyond the Python daemon's contracts: parallel chats, crashes, the old daemon's state, cursor
// loss, poison rows and secrets in logs, on the real daemon process with real codex.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/appserver/appservertest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/childproc"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// Five chats whose messages arrive in one poll are answered in parallel, and in order within
// each chat. Parallelism is shown structurally: the mock model holds the first request of every
// chat until all five are in flight at once, which a daemon that ran chats one after another
// could never reach (it would hit the gate's safety timeout and the test fails). Order: every
// chat's replies carry the history count, "reply #1..#3", in its message order.
func TestE2EParallelChatsAnsweredInOrder(t *testing.T) {
	t.Parallel()
	const chats, perChat = 5, 3
	g := newGate(chats)
	script := func(req mockmodel.Request) mockmodel.Reply {
		if !req.HasToolOutput && len(req.UserTexts) == 1 && strings.HasSuffix(req.LastUserText, "/m1") {
			// The safety timeout stays under the harness's wait so that a serial daemon fails
			// with the message below.
			if !g.hold(30 * time.Second) {
				return mockmodel.Reply{Text: "gate timed out: " + req.LastUserText}
			}
		}
		return mockmodel.DefaultScript(req)
	}
	e := newE2E(t, e2eConfig{Script: script})
	t.Cleanup(g.release)
	d := e.start()

	names := []string{"canvas"}
	for i := 1; i < chats; i++ {
		names = append(names, fmt.Sprintf("peer-%d", i))
	}
	var rows []moleculetest.Row
	for m := 1; m <= perChat; m++ { // interleaved, as a busy workspace would see them
		for _, name := range names {
			text := fmt.Sprintf("%s/m%d", name, m)
			if name == "canvas" {
				rows = append(rows, moleculetest.CanvasMessage(text))
			} else {
				rows = append(rows, moleculetest.PeerMessage(name, text))
			}
		}
	}
	e.plat.Enqueue(rows...)
	d.waitPlatform("all replies", func() bool { return e.plat.Deliveries() >= chats*perChat })
	d.waitPolls(3)

	if g.timedOut() {
		t.Fatalf("at most %d of %d first turns were in flight together: chats were not answered in parallel", g.most(), chats)
	}
	for _, name := range names {
		var got []string
		if name == "canvas" {
			got = e.notifyTexts()
		} else {
			for _, s := range e.plat.A2ASends() {
				if s.Peer == name {
					got = append(got, s.Text)
				}
			}
		}
		var want []string
		for m := 1; m <= perChat; m++ {
			want = append(want, fmt.Sprintf("reply #%d: %s/m%d", m, name, m))
		}
		if !slices.Equal(got, want) {
			t.Errorf("chat %s replies = %q, want %q", name, got, want)
		}
	}
	children := chatChildren(d.status())
	pids := map[int]bool{}
	for _, c := range children {
		pids[c.PID] = true
	}
	if len(children) != chats || len(pids) != childrenFor(t, chats) {
		t.Errorf("children = %+v, want %d chats in %d codex children", children, chats, childrenFor(t, chats))
	}
	d.stop(stopTimeout)
}

// A daemon SIGKILLed mid-turn (the model stream hangs) is restarted on the same state dir: every
// message is answered exactly once (the one answered before the crash is not answered again,
// the interrupted one and the one queued behind it are answered, in order), the killed daemon's
// codex children are gone after the new daemon's boot sweep (no orphan; the sweep finds them
// gone, since the kernel kills a child whose daemon dies: Pdeathsig), and `supervisor status`
// between the two daemons says no daemon runs although the dead one left its socket file.
func TestE2EKillMidTurnAnswersEveryMessageOnce(t *testing.T) {
	t.Parallel()
	first := firstTime()
	script := func(req mockmodel.Request) mockmodel.Reply {
		if !req.HasToolOutput && req.LastUserText == "crash-me" && first("crash-me") {
			return mockmodel.Reply{Hang: true}
		}
		return mockmodel.DefaultScript(req)
	}
	e := newE2E(t, e2eConfig{Script: script})
	d1 := e.start()
	e.plat.Enqueue(moleculetest.PeerMessage("peer-b", "before the crash"))
	d1.waitPlatform("the reply before the crash", func() bool { return len(e.plat.A2ASends()) == 1 })
	e.plat.Enqueue(moleculetest.CanvasMessage("crash-me"), moleculetest.CanvasMessage("queued behind"))
	d1.waitHung(1)

	doc := d1.status()
	var victims []proc
	for _, c := range doc.Snapshot.Children {
		if c.PID == 0 {
			continue // a spare still spawning
		}
		victims = append(victims, procOf(t, c.PID))
		if c.ChatKey == e.canvasKey() && c.State != "busy" {
			t.Errorf("canvas child state = %s, want busy mid-turn", c.State)
		}
	}
	// Spares die with the daemon too: they are among the victims, not among the chats' children.
	if len(chatChildren(doc)) != 2 {
		t.Fatalf("children before the kill = %+v, want the peer's and the canvas's", doc.Snapshot.Children)
	}
	d1.kill()

	if _, err := os.Stat(filepath.Join(e.stateDir, controlSocketName)); err != nil {
		t.Logf("the killed daemon left no socket file (%v); the stale-socket case is not exercised", err)
	}
	var out, errOut strings.Builder
	if code := runMain(context.Background(), []string{"status", "--state-dir", e.stateDir}, noEnv, &out, &errOut); code == 0 ||
		!strings.Contains(errOut.String(), "no supervisor daemon is running") {
		t.Errorf("status with a dead daemon: exit %d, stderr %q; want non-zero and 'no supervisor daemon is running'", code, errOut.String())
	}

	d2 := e.start()
	// The boot sweep runs before the control socket answers, so this only allows for /proc lag
	// (the bound is a hang guard).
	waitGone(t, waitTimeout, victims...)
	d2.waitPlatform("the two canvas replies", func() bool { return len(e.plat.Notifies()) == 2 })
	d2.waitPolls(5)

	if got := e.notifyTexts(); len(got) != 2 || !strings.HasSuffix(got[0], ": crash-me") || !strings.HasSuffix(got[1], ": queued behind") ||
		!strings.HasPrefix(got[0], "reply #") || !strings.HasPrefix(got[1], "reply #") {
		t.Errorf("canvas replies after the restart = %q, want crash-me then queued behind, each answered", got)
	}
	if n := e.countReplies("reply #1: before the crash"); n != 1 || len(e.plat.A2ASends()) != 1 {
		t.Errorf("the message answered before the crash was delivered %d times (%d A2A sends), want once", n, len(e.plat.A2ASends()))
	}
	if n := len(e.requestsFor("before the crash")); n != 1 {
		t.Errorf("codex ran %d turns for the message answered before the crash, want 1", n)
	}
	if n := len(e.requestsFor("crash-me")); n != 2 {
		t.Errorf("codex ran %d turns for crash-me, want 2 (the killed one and the answer)", n)
	}
	swept := map[float64]string{}
	for _, l := range d2.logsWith("boot sweep: recorded child") {
		pid, _ := l["pid"].(float64)
		swept[pid] = l.str("action")
	}
	for _, v := range victims {
		if _, ok := swept[float64(v.pid)]; !ok {
			t.Errorf("the boot sweep did not consider the killed daemon's child %d (sweep log: %v)", v.pid, swept)
		}
	}
	t.Logf("boot sweep actions by pid: %v", swept)
	d2.stop(stopTimeout)
}

// The sessions.json the Python daemon wrote (a flat {"canvas:<ws>": "<thread id>"} object) with
// a thread made by `codex exec` is continued: the daemon's first reply in that chat is
// "reply #2", the model sees the exec turn as history, and the file keeps the same thread.
func TestE2EContinuesThreadOfOldDaemon(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	res, err := appservertest.ExecTurn(ctx, e.codexBin, e.codexHome, e.workDir, "", "from the old daemon")
	if err != nil {
		t.Fatalf("codex exec: %v\n%s", err, res.Stderr)
	}
	if res.ThreadID == "" || res.Reply != "reply #1: from the old daemon" {
		t.Fatalf("codex exec = thread %q reply %q", res.ThreadID, res.Reply)
	}
	if err := os.MkdirAll(e.stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	old := fmt.Sprintf("{\"canvas:%s\": %q}\n", e.plat.WorkspaceID(), res.ThreadID)
	if err := os.WriteFile(filepath.Join(e.stateDir, "sessions.json"), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}

	d := e.start()
	e.plat.Enqueue(moleculetest.CanvasMessage("now warm"))
	d.waitPlatform("the reply", func() bool { return len(e.plat.Notifies()) == 1 })
	if got := e.plat.Notifies()[0].Message; got != "reply #2: now warm" {
		t.Errorf("first reply = %q, want %q (the exec thread continued)", got, "reply #2: now warm")
	}
	if reqs := e.requestsFor("now warm"); len(reqs) != 1 || !slices.Equal(reqs[0].UserTexts, []string{"from the old daemon", "now warm"}) {
		t.Errorf("model request = %+v, want history [from the old daemon, now warm]", reqs)
	}
	if doc := d.status(); childThread(doc, e.canvasKey()) != res.ThreadID {
		t.Errorf("child thread = %q, want the exec thread %q", childThread(doc, e.canvasKey()), res.ThreadID)
	}
	if got := e.sessionsFile(); len(got) != 1 || got[e.canvasKey()] != res.ThreadID {
		t.Errorf("sessions.json = %v, want the old mapping kept", got)
	}
	d.stop(stopTimeout)
}

func childThread(doc StatusDoc, chatKey string) string {
	for _, c := range doc.Snapshot.Children {
		if c.ChatKey == chatKey {
			return c.ThreadID
		}
	}
	return ""
}

// When the platform no longer knows the cursor (410 Gone), the daemon falls back to the recent
// window and still answers the new rows, in order, without answering old rows again: first for
// a cursor that expired while the daemon was down (deterministic: the restart's first poll gets
// the 410 and the fallback window holds an old row and two new ones), then for a 410 while it
// runs.
func TestE2ECursorGoneFallsBackWithoutDuplicates(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{})
	d1 := e.start()
	id1 := e.plat.Enqueue(moleculetest.CanvasMessage("m1"))[0]
	d1.waitPlatform("the first reply", func() bool { return len(e.plat.Notifies()) == 1 })
	d1.waitUntil("the cursor at the first row", func() bool { return d1.bridgeStats().Cursor == id1 })
	d1.stop(stopTimeout)

	e.plat.Enqueue(moleculetest.CanvasMessage("m2"), moleculetest.CanvasMessage("m3"))
	e.plat.GoneNext()
	d2 := e.start()
	d2.waitPlatform("replies to the rows that came while the daemon was down", func() bool { return len(e.plat.Notifies()) == 3 })
	calls := e.plat.CallsTo(moleculetest.RouteActivity)
	gone := slices.IndexFunc(calls, func(c moleculetest.Call) bool { return c.Status == http.StatusGone })
	if gone < 0 || calls[gone].Query.Get("since_id") != id1 || gone+1 >= len(calls) || !calls[gone+1].Query.Has("since_secs") {
		t.Errorf("activity calls = %s; want a 410 for since_id=%s followed by a since_secs poll", e.callSummary(), id1)
	}

	e.plat.GoneNext()
	d2.waitPlatform("a second 410", func() bool { return e.plat.CountCalls(moleculetest.RouteActivity, http.StatusGone) == 2 })
	e.plat.Enqueue(moleculetest.CanvasMessage("m4"))
	d2.waitPlatform("the reply after the second 410", func() bool { return len(e.plat.Notifies()) == 4 })
	d2.waitPolls(5)

	want := []string{"reply #1: m1", "reply #2: m2", "reply #3: m3", "reply #4: m4"}
	if got := e.notifyTexts(); !slices.Equal(got, want) {
		t.Errorf("replies = %q, want %q (each row once, in order)", got, want)
	}
	for _, m := range []string{"m1", "m2", "m3", "m4"} {
		if n := len(e.requestsFor(m)); n != 1 {
			t.Errorf("codex ran %d turns for %s, want 1", n, m)
		}
	}
	d2.stop(stopTimeout)
}

// Rows that cannot be answered (not a JSON object, no id, an unknown activity type, a peer
// message whose peer is not a workspace id, no text) are logged with their id (where they have
// one) and counted, the cursor moves past them, codex never sees them, and the good row after
// them is answered.
func TestE2EPoisonRowsLoggedAndSkipped(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{})
	d := e.start()
	e.plat.Enqueue(moleculetest.CanvasMessage("good one"))
	d.waitPlatform("the first reply", func() bool { return len(e.plat.Notifies()) == 1 })

	body := func(text string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","method":"message/send","params":{"message":{"role":"user","parts":[{"kind":"text","text":%q}]}}}`, text)
	}
	e.plat.EnqueueRaw(
		// A row that is JSON but not an object. (A response that is not JSON at all is a failed
		// poll, retried: the rows after it cannot be read, so there is nothing to move past.)
		`"this row is a string"`,
		`{"activity_type":"a2a_receive","method":"message/send","request_body":`+body("row without id")+`}`,
		`{"id":"poison-kind","activity_type":"memory_write","method":"message/send","request_body":`+body("unknown kind")+`}`,
		`{"id":"poison-peer","activity_type":"a2a_receive","method":"message/send","source_id":"Not A Workspace!","request_body":`+body("peer without a valid peer")+`}`,
		`{"id":"poison-empty","activity_type":"a2a_receive","method":"message/send","request_body":{"params":{"message":{"parts":[]}}}}`,
	)
	good := e.plat.Enqueue(moleculetest.CanvasMessage("good two"))[0]
	d.waitPlatform("the reply after the poison rows", func() bool { return len(e.plat.Notifies()) == 2 })
	d.waitUntil("the cursor past the poison rows", func() bool { return d.bridgeStats().Cursor == good })

	if got := e.plat.Notifies()[1].Message; got != "reply #2: good two" {
		t.Errorf("reply after the poison rows = %q", got)
	}
	if s := d.bridgeStats(); s.Poison != 5 {
		t.Errorf("poison count = %d, want 5 (stats %+v)", s.Poison, s)
	}
	poison := d.logsWith("poison row")
	byID := map[string]logEntry{}
	var reasons []string
	for _, l := range poison {
		byID[l.str("activity_id")] = l
		reasons = append(reasons, l.str("reason"))
	}
	for _, id := range []string{"poison-kind", "poison-peer", "poison-empty"} {
		if l, ok := byID[id]; !ok || l.str("level") != "warn" || l.str("reason") == "" {
			t.Errorf("no warning naming poison row %s with a reason (poison logs: %v)", id, poison)
		}
	}
	for _, r := range []string{"row is not a JSON object", "row has no id"} {
		if !slices.Contains(reasons, r) {
			t.Errorf("no poison log with reason %q (reasons: %q)", r, reasons)
		}
	}
	for _, text := range []string{"row without id", "unknown kind", "peer without a valid peer"} {
		if n := len(e.requestsFor(text)); n != 0 {
			t.Errorf("codex ran %d turns for poison text %q", n, text)
		}
	}
	if n := e.mock.RequestCount(); n != 2 {
		t.Errorf("model requests = %d, want 2 (the good rows)", n)
	}
	d.stop(stopTimeout)
}

// The workspace token never reaches the daemon's log, even when every platform call fails once
// with an error body that quotes the request's Authorization header (a careless proxy): the log
// shows those errors redacted. (Every other test checks the token's absence too, at each stop.)
// Nor does it reach the codex children's environment.
func TestE2ETokenAbsentFromLogs(t *testing.T) {
	t.Parallel() // mostly waits out the bridge's retry backoff (1 s initial, not a flag)
	e := newE2E(t, e2eConfig{Platform: moleculetest.Config{LeakAuthInErrors: true}})
	e.plat.FailNext(moleculetest.RouteRegister, 1, http.StatusBadGateway)
	e.plat.FailNext(moleculetest.RouteActivity, 1, http.StatusInternalServerError)
	e.plat.FailNext(moleculetest.RouteNotify, 2, http.StatusBadGateway)
	e.plat.FailNext(moleculetest.RouteA2A, 1, http.StatusServiceUnavailable)
	d := e.start()
	e.plat.Enqueue(moleculetest.CanvasMessage("canvas asks"), moleculetest.PeerMessage("peer-t", "peer asks"))
	d.waitPlatform("both replies", func() bool { return len(e.plat.Notifies()) == 1 && len(e.plat.A2ASends()) == 1 })
	// Nor does it reach codex, which runs model-written commands: the children's environment
	// has the platform settings but not the token.
	for _, c := range d.status().Snapshot.Children {
		if c.PID == 0 {
			continue // a spare still spawning
		}
		environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", c.PID))
		if err != nil {
			t.Fatalf("read environment of codex %d: %v", c.PID, err)
		}
		if !bytes.Contains(environ, []byte("PLATFORM_URL=")) || bytes.Contains(environ, []byte(e.plat.Token())) {
			t.Errorf("codex %d (%s) environment: want PLATFORM_URL and no workspace token", c.PID, c.ChatKey)
		}
	}
	d.stop(stopTimeout) // checkLog fails the test if the token is in the log

	log := d.log()
	if strings.Contains(log, e.plat.Token()) {
		t.Fatal("the daemon log contains the workspace token")
	}
	leaky := 0
	for _, l := range d.logEntries() {
		for _, v := range l {
			if s, ok := v.(string); ok && strings.Contains(s, "request had Authorization") {
				leaky++
				if !strings.Contains(s, "[REDACTED]") {
					t.Errorf("log field quoting the Authorization header is not redacted: %q", s)
				}
			}
		}
	}
	// register, poll, two notifies, one A2A send failed with a leaking body.
	if leaky < 5 {
		t.Errorf("%d log fields quote the leaking error bodies, want at least 5: the leak path was not exercised", leaky)
	}
}

// A reply codex produced but the platform refused is kept across a crash: the daemon is
// SIGKILLed while delivery fails, and the next daemon delivers the stored reply (same text)
// without running codex again, then moves the cursor past the row. The Python daemon re-ran
// codex for a failed reply.
func TestE2EPendingReplySurvivesCrash(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{})
	e.plat.FailNext(moleculetest.RouteNotify, 1<<30, http.StatusBadGateway)
	d1 := e.start()
	id := e.plat.Enqueue(moleculetest.CanvasMessage("keep my reply"))[0]
	d1.waitPlatform("a failed delivery", func() bool {
		return e.plat.CountCalls(moleculetest.RouteNotify, http.StatusBadGateway) >= 1
	})
	d1.kill()
	if st := e.bridgeState(); !st.pending(id) || st.Cursor == id {
		t.Fatalf("state after the crash = %+v, want the reply pending and the row not passed", st)
	}

	e.plat.ClearFailures()
	d2 := e.start()
	d2.waitPlatform("the delivered reply", func() bool { return len(e.plat.Notifies()) == 1 })
	d2.waitUntil("the cursor past the row", func() bool { return d2.bridgeStats().Cursor == id })
	d2.waitPolls(5)
	if got := e.notifyTexts(); !slices.Equal(got, []string{"reply #1: keep my reply"}) {
		t.Errorf("replies = %q, want the stored reply once", got)
	}
	if n := len(e.requestsFor("keep my reply")); n != 1 {
		t.Errorf("codex ran %d turns for the message, want 1 (the reply was stored)", n)
	}
	if s := d2.bridgeStats(); s.Recovered != 1 || s.Received != 0 {
		t.Errorf("second daemon stats = %+v, want the reply recovered and the row not answered again", s)
	}
	if children := chatChildren(d2.status()); len(children) != 0 {
		t.Errorf("second daemon started codex children %+v for a stored reply", children)
	}
	d2.stop(stopTimeout)
}

// A codex child that a dead daemon left running (listed in children.json; here a real `codex
// app-server` whose stdin the test holds open, so it would never exit by itself) is ended by the
// next daemon's boot sweep before that daemon serves, while a process whose pid is listed with
// another start time (the pid was reused by a stranger) is left alone. The daemon then works.
func TestE2EBootSweepEndsOrphanOfDeadDaemon(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true})
	orphan := startHeld(t, e.codexBin, []string{"app-server"}, "CODEX_HOME="+e.codexHome)
	stranger := startHeld(t, "/bin/sh", []string{"-c", "exec cat"})
	orphanID, strangerID := procOf(t, orphan.pid), procOf(t, stranger.pid)
	exe := func(pid int) string {
		p, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	record := map[string]any{
		"daemon_pid": 1 << 22, // no such daemon
		"written":    time.Now().UTC(),
		"children": []childproc.Record{
			{PID: orphan.pid, StartTime: orphanID.start, Exe: exe(orphan.pid), ChatKey: "alpha"},
			{PID: stranger.pid, StartTime: strangerID.start + 1, Exe: exe(stranger.pid), ChatKey: "beta"},
		},
	}
	b, _ := json.Marshal(record)
	if err := os.MkdirAll(e.stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.stateDir, supervisor.ChildrenFile), b, 0o600); err != nil {
		t.Fatal(err)
	}

	d := e.start() // ready means the boot sweep is over
	select {
	case <-orphan.done:
	case <-time.After(waitTimeout): // a hang guard: the sweep signalled it before ready
		t.Fatalf("the recorded orphan %d still runs after the daemon started", orphan.pid)
	}
	// Its stdin is still open, so only the sweep's signal ends it: codex exits 0 when it has set
	// up its SIGTERM handler by then, and dies of the signal when it has not.
	if ws, ok := orphan.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !(ws.Signaled() || ws.Exited() && ws.ExitStatus() == 0) {
		t.Errorf("orphan ended with %v, want ended by the sweep's signal", orphan.cmd.ProcessState)
	}
	if stranger.exited() || strangerID.gone() {
		t.Errorf("the sweep signalled pid %d although its start time differs from the record", stranger.pid)
	}
	// One sweep per boot: each record is reported exactly once (a second sweep would report the
	// orphan again as "gone" and cost another grace period at start).
	actions := map[float64]string{}
	for _, l := range d.logsWith("boot sweep: recorded child") {
		pid, _ := l["pid"].(float64)
		if prev, seen := actions[pid]; seen {
			t.Errorf("pid %v swept twice (%s, then %s)", pid, prev, l.str("action"))
			continue
		}
		actions[pid] = l.str("action")
	}
	if a := actions[float64(orphan.pid)]; a != "terminated" && a != "killed" {
		t.Errorf("sweep action for the orphan = %q, want terminated or killed (all: %v)", a, actions)
	}
	if a := actions[float64(stranger.pid)]; a != "gone" {
		t.Errorf("sweep action for the stranger = %q, want gone (all: %v)", a, actions)
	}
	if r := newLocalClient(t, d).send("alpha", "after the sweep"); r.Text != "reply #1: after the sweep" {
		t.Errorf("reply after the sweep = %+v", r)
	}
	d.stop(stopTimeout)
}

// heldProc is a process the test started with its stdin held open.
type heldProc struct {
	cmd   *exec.Cmd
	pid   int
	stdin io.WriteCloser
	done  chan struct{} // closed once reaped
}

func (h *heldProc) exited() bool {
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

// startHeld starts bin in its own process group with stdin held open; cleanup kills and reaps it.
func startHeld(t *testing.T, bin string, args []string, env ...string) *heldProc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	h := &heldProc{cmd: cmd, pid: cmd.Process.Pid, stdin: stdin, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(h.done)
	}()
	t.Cleanup(func() {
		if !h.exited() {
			_ = syscall.Kill(-h.pid, syscall.SIGKILL) // not reaped yet: the group id is still ours
		}
		<-h.done
	})
	return h
}

// A daemon SIGKILLed while its codex child runs an MCP server: the kernel kills the child
// (parent-death signal), but not the MCP server, which codex starts in a process group of its
// own. The next daemon's boot sweep finds it by the dead child's session and kills it, before
// that daemon serves.
func TestE2EBootSweepKillsWhatAKilledChildLeft(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true})
	pidFile := e.addSleeperMCP()

	// No spare: a spare's thread, and its warm-up's throwaway thread, start MCP servers of their
	// own in the child's session while the test counts them (a shared child hosts the spare's
	// thread beside the chat's), and the sweep does the same whatever their number.
	d1 := e.start("--spares", "0")
	if r := newLocalClient(t, d1).send("alpha", "hi"); r.Text != "reply #1: hi" {
		t.Fatalf("reply = %+v", r)
	}
	child := procOf(t, childPID(d1.status(), "alpha"))
	servers := d1.waitSleeperMCP(pidFile, child.pid)

	d1.kill()
	waitGone(t, 10*time.Second, child)
	// What is left for the sweep: the job always, the server itself when codex did not stop it.
	left := servers[:0:0]
	for _, s := range servers {
		if !s.gone() {
			left = append(left, s)
		}
	}
	if len(left) == 0 {
		t.Fatalf("nothing of the MCP server %v outlived its codex child: the job in its own group should have", servers)
	}
	servers = left

	d2 := e.start() // ready means the boot sweep is over
	waitGone(t, 5*time.Second, servers...)
	var swept []logEntry
	for _, l := range d2.logsWith("boot sweep: recorded child") {
		if pid, _ := l["pid"].(float64); int(pid) == child.pid {
			swept = append(swept, l)
		}
	}
	if len(swept) != 1 || swept[0]["remains_killed"] != float64(len(servers)) {
		t.Errorf("sweep log for child %d = %v, want one entry with remains_killed %d", child.pid, swept, len(servers))
	}
	if r := newLocalClient(t, d2).send("alpha", "after"); !strings.HasPrefix(r.Text, "reply #2: after") {
		t.Errorf("reply after the sweep = %+v", r)
	}
	d2.stop(stopTimeout)
}

// A stored thread this CODEX_HOME does not have (a migrator whose CODEX_HOME is not the one the
// old daemon used) is not replaced silently: the old id goes to threads-archive.jsonl with the
// reason, the chat is told once that its earlier conversation could not be restored and why,
// and doctor names the likely cause before anything runs.
func TestE2EUnresumableThreadIsKeptAndTold(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{})
	if err := os.MkdirAll(e.stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	const lost = "01a00000-0000-7000-8000-000000000001"
	old := fmt.Sprintf("{\"canvas:%s\": %q}\n", e.plat.WorkspaceID(), lost)
	if err := os.WriteFile(filepath.Join(e.stateDir, "sessions.json"), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}

	doctor := exec.Command(os.Args[0], "doctor", "--codex-bin", e.codexBin, "--state-dir", e.stateDir, "--inbox", "local")
	doctor.Env, doctor.Dir = e.env(), e.workDir
	out, _ := doctor.CombinedOutput() // its exit code depends on checks this test does not set up
	if !strings.Contains(string(out), "not found in CODEX_HOME "+e.codexHome) || !strings.Contains(string(out), "1 of 1") {
		t.Errorf("doctor does not name the missing conversation and the CODEX_HOME:\n%s", out)
	}

	d := e.start()
	e.plat.Enqueue(moleculetest.CanvasMessage("hello again"))
	d.waitPlatform("the reply", func() bool { return len(e.plat.Notifies()) == 1 })
	got := e.plat.Notifies()[0].Message
	if !strings.Contains(got, "reply #1: hello again") || !strings.Contains(got, "could not be restored: thread "+lost+" was not found in CODEX_HOME "+e.codexHome) {
		t.Errorf("first reply = %q, want the answer and the notice", got)
	}
	archive, err := os.ReadFile(filepath.Join(e.stateDir, "threads-archive.jsonl"))
	if err != nil || !strings.Contains(string(archive), lost) || !strings.Contains(string(archive), "not resumable") {
		t.Errorf("threads-archive.jsonl = %q (%v), want the lost id with its reason", archive, err)
	}
	if s := e.sessionsFile(); s[e.canvasKey()] == lost || s[e.canvasKey()] == "" {
		t.Errorf("sessions.json = %v, want the new thread", s)
	}
	e.plat.Enqueue(moleculetest.CanvasMessage("and again"))
	d.waitPlatform("the second reply", func() bool { return len(e.plat.Notifies()) == 2 })
	if got := e.plat.Notifies()[1].Message; got != "reply #2: and again" {
		t.Errorf("second reply = %q, want the answer alone (told once)", got)
	}
	d.stop(stopTimeout)
}

// A codex child that crashes while the daemon runs leaves nothing behind until the next boot:
// its MCP server, and the job that server put in a process group of its own within codex's
// session, are killed when the daemon reaps the child. The chat goes on in a new child.
func TestE2ECrashedChildRemainsGoWhenReaped(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true})
	pidFile := e.addSleeperMCP()

	d := e.start("--spares", "0")
	c := newLocalClient(t, d)
	if r := c.send("alpha", "hi"); r.Text != "reply #1: hi" {
		t.Fatalf("reply = %+v", r)
	}
	child := procOf(t, childPID(d.status(), "alpha"))
	servers := d.waitSleeperMCP(pidFile, child.pid)

	if err := syscall.Kill(child.pid, syscall.SIGKILL); err != nil { // the crash
		t.Fatal(err)
	}
	d.waitUntil("the crashed child out of the table", func() bool { return childPID(d.status(), "alpha") != child.pid })
	// Bounded only as a hang guard: the remains are killed before the child is reaped.
	waitGone(t, waitTimeout, servers...)
	if d.hasExited() {
		t.Fatal("the daemon exited")
	}
	if r := c.send("alpha", "again"); !strings.HasPrefix(r.Text, "reply #2: again") {
		t.Errorf("reply after the crash = %+v", r)
	}
	d.stop(stopTimeout)
}

// addSleeperMCP gives codex an MCP server that never answers (codex tolerates it: the thread
// starts, the server's start-up is reported as pending) and returns the file where it writes its
// pid and the pid of a job it starts in a process group of its own (set -m) within codex's
// session: remains that only a kill of the session reaches. When codex's stdin closes a moment
// before its parent-death signal it may stop the server itself; the job it does not know of is
// always left.
func (e *e2e) addSleeperMCP() (pidFile string) {
	e.t.Helper()
	pidFile = filepath.Join(e.root, "mcp.pids")
	mcp := fmt.Sprintf("\n[mcp_servers.sleeper]\ncommand = \"/bin/bash\"\nargs = [\"-c\", %s]\n",
		strconv.Quote("set -m; sleep 777 & echo $! >> "+pidFile+"; echo $$ >> "+pidFile+"; exec sleep 777"))
	f, err := os.OpenFile(filepath.Join(e.codexHome, "config.toml"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(mcp); err != nil {
		e.t.Fatal(err)
	}
	return pidFile
}

// waitSleeperMCP waits until the server of addSleeperMCP and its job run in the session of the
// child sid (the daemon's start-up login check runs an app-server too, whose server ends with
// it), and returns them; they are killed at cleanup if a test left them.
func (d *daemonProc) waitSleeperMCP(pidFile string, sid int) []proc {
	t := d.e.t
	t.Helper()
	// codex starts the MCP servers for each thread it loads: a shared child (make test-shared)
	// runs a pair for each of its threads.
	want := 2
	for _, c := range d.status().Snapshot.Children {
		if c.PID == sid && c.Threads > 1 {
			want = 2 * c.Threads
		}
	}
	var servers []proc
	d.waitUntil("the MCP server and its job", func() bool {
		b, _ := os.ReadFile(pidFile)
		servers = servers[:0]
		for _, s := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(s)
			if err != nil {
				return false
			}
			if start, state, ssid, err := procStatSession(pid); err == nil && state != 'Z' && ssid == sid {
				servers = append(servers, proc{pid: pid, start: start})
			}
		}
		return len(servers) == want
	})
	t.Cleanup(func() {
		for _, s := range servers {
			if !s.gone() {
				_ = syscall.Kill(s.pid, syscall.SIGKILL)
			}
		}
	})
	return servers
}
