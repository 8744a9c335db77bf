//go:build linux

package main

// The daemon as an operator meets it: `supervisor status`, the local inbox, and SIGTERM.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/local"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// noEnv is an empty environment for in-process runMain calls.
func noEnv(string) string { return "" }

// localClient posts to a local inbox daemon.
type localClient struct {
	t    *testing.T
	base string
	hc   *http.Client
}

func newLocalClient(t *testing.T, d *daemonProc) *localClient {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	return &localClient{t: t, base: "http://" + d.ready.Daemon.Listen, hc: &http.Client{Transport: tr, Timeout: waitTimeout}}
}

// post sends body to the chat's messages endpoint and returns the status and the body.
func (c *localClient) post(chatKey, body string) (int, []byte, http.Header) {
	c.t.Helper()
	resp, err := c.hc.Post(c.base+"/v1/chats/"+chatKey+"/messages", "application/json", strings.NewReader(body))
	if err != nil {
		c.t.Fatalf("POST %s: %v", chatKey, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp.StatusCode, b, resp.Header
}

// send posts a text and decodes the 200 reply.
func (c *localClient) send(chatKey, text string) local.Reply {
	c.t.Helper()
	body, _ := json.Marshal(local.Message{Text: text})
	code, b, _ := c.post(chatKey, string(body))
	if code != http.StatusOK {
		c.t.Fatalf("POST %s %q: HTTP %d: %s", chatKey, text, code, b)
	}
	var r local.Reply
	if err := json.Unmarshal(b, &r); err != nil {
		c.t.Fatalf("reply is not JSON: %v: %s", err, b)
	}
	return r
}

// The local inbox end to end: POST /v1/chats/{key}/messages answers 200 with a JSON reply that
// carries codex's answer; the chat's second message continues its thread; a body that is not
// JSON (or has no text) gets a JSON 400 and never reaches codex.
func TestE2ELocalInbox(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true})
	d := e.start()
	c := newLocalClient(t, d)

	r1 := c.send("alpha", "hello local")
	if r1.Text != "reply #1: hello local" || r1.Status != "completed" || r1.ChatKey != "alpha" || r1.ThreadID == "" || r1.TurnID == "" {
		t.Errorf("first reply = %+v", r1)
	}
	r2 := c.send("alpha", "again")
	if r2.Text != "reply #2: again" || r2.ThreadID != r1.ThreadID {
		t.Errorf("second reply = %+v, want reply #2 on thread %s", r2, r1.ThreadID)
	}

	for _, body := range []string{`{not json`, `{"text": ""}`} {
		code, b, h := c.post("alpha", body)
		var le local.ErrorReply
		if code != http.StatusBadRequest || json.Unmarshal(b, &le) != nil || le.Error == "" ||
			!strings.HasPrefix(h.Get("Content-Type"), "application/json") {
			t.Errorf("POST %q: HTTP %d %s (%s), want a JSON 400 with an error", body, code, b, h.Get("Content-Type"))
		}
	}
	if n := e.mock.RequestCount(); n != 2 {
		t.Errorf("model requests = %d, want 2 (bad requests never reach codex)", n)
	}
	d.stop(stopTimeout)
}

// `supervisor status` against a running daemon prints an aligned table with CHAT, THREAD, PID
// and STATE columns and one row per chat showing its live codex pid; `status --json` is the
// status document; with no daemon on the state dir, status exits non-zero and says so.
func TestE2EStatusCommand(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true})
	d := e.start()
	c := newLocalClient(t, d)
	threads := map[string]string{}
	for _, key := range []string{"alpha", "beta"} {
		threads[key] = c.send(key, "hi "+key).ThreadID
	}
	live := map[string]int{}
	for _, ch := range chatChildren(d.status()) {
		live[ch.ChatKey] = ch.PID
		if syscall.Kill(ch.PID, 0) != nil {
			t.Errorf("child %d of %s is not running", ch.PID, ch.ChatKey)
		}
	}
	if len(live) != 2 {
		t.Fatalf("children = %v, want alpha and beta", live)
	}

	var out, errOut bytes.Buffer
	if code := runMain(context.Background(), []string{"status", "--state-dir", e.stateDir}, noEnv, &out, &errOut); code != 0 {
		t.Fatalf("status exit %d, stderr %q", code, errOut.String())
	}
	table := out.String()
	t.Logf("supervisor status:\n%s", table)
	lines := strings.Split(table, "\n")
	hi := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "CHAT") })
	if hi < 0 {
		t.Fatalf("no header row in:\n%s", table)
	}
	// Columns are counted in runes, as a terminal shows them: shortened thread ids end in "…".
	header := []rune(lines[hi])
	col := map[string]int{}
	for _, name := range []string{"CHAT", "THREAD", "PID", "STATE"} {
		col[name] = runeIndex(header, name)
		if col[name] < 0 {
			t.Fatalf("header %q lacks %s", string(header), name)
		}
	}
	if !(col["CHAT"] < col["THREAD"] && col["THREAD"] < col["PID"] && col["PID"] < col["STATE"]) {
		t.Errorf("header %q: columns out of order", string(header))
	}
	// field returns the cell of row that starts exactly at the header's column start: the
	// table is aligned.
	field := func(row, name string) string {
		r, start := []rune(row), col[name]
		if start >= len(r) || r[start] == ' ' || (start > 0 && r[start-1] != ' ') {
			return ""
		}
		return strings.Fields(string(r[start:]))[0]
	}
	for key, pid := range live {
		ri := slices.IndexFunc(lines[hi+1:], func(l string) bool { return strings.HasPrefix(l, key+" ") })
		if ri < 0 {
			t.Errorf("no row for chat %s", key)
			continue
		}
		row := lines[hi+1+ri]
		if got := field(row, "PID"); got != strconv.Itoa(pid) {
			t.Errorf("row %q: PID cell %q, want the live pid %d under the PID header", row, got, pid)
		}
		if got := field(row, "STATE"); got != "idle" {
			t.Errorf("row %q: STATE cell %q, want idle", row, got)
		}
		if got := field(row, "THREAD"); got == "" || !strings.HasPrefix(threads[key], strings.TrimSuffix(got, "…")) {
			t.Errorf("row %q: THREAD cell %q, want a prefix of %s", row, got, threads[key])
		}
	}

	out.Reset()
	if code := runMain(context.Background(), []string{"status", "--json", "--state-dir", e.stateDir}, noEnv, &out, &errOut); code != 0 {
		t.Fatalf("status --json exit %d, stderr %q", code, errOut.String())
	}
	var doc StatusDoc
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("status --json is not a status document: %v\n%s", err, out.String())
	}
	if doc.Daemon.PID != d.pid || len(chatChildren(doc)) != 2 || doc.Daemon.Inbox != "local" {
		t.Errorf("status --json = %+v", doc)
	}
	for _, ch := range chatChildren(doc) {
		if live[ch.ChatKey] != ch.PID || ch.ThreadID != threads[ch.ChatKey] {
			t.Errorf("status --json child %+v, want pid %d thread %s", ch, live[ch.ChatKey], threads[ch.ChatKey])
		}
	}
	d.stop(stopTimeout)

	empty, err := os.MkdirTemp("", "cwe2e-nodaemon-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(empty)
	for _, dir := range []string{empty, e.stateDir} { // never used; used by a daemon that stopped
		out.Reset()
		errOut.Reset()
		code := runMain(context.Background(), []string{"status", "--state-dir", dir}, noEnv, &out, &errOut)
		if code == 0 || !strings.Contains(errOut.String(), "no supervisor daemon is running") || !strings.Contains(errOut.String(), dir) {
			t.Errorf("status on %s without a daemon: exit %d, stderr %q; want non-zero and a message naming the state dir", dir, code, errOut.String())
		}
	}
}

// SIGTERM while a turn hangs: the daemon drains for --drain-timeout (it does not cut the turn at
// once), then interrupts it (codex honours the interrupt) and exits 0, leaving no codex child. The
// interrupted message is not acknowledged (no reply, the cursor does not pass it, nothing
// pending), so the next daemon answers it, once.
func TestE2ESigtermMidTurnExitsWithinDrainAndDoesNotAck(t *testing.T) {
	t.Parallel()
	first := firstTime()
	script := func(req mockmodel.Request) mockmodel.Reply {
		if !req.HasToolOutput && req.LastUserText == "hang on" && first("hang on") {
			return mockmodel.Reply{Hang: true}
		}
		return mockmodel.DefaultScript(req)
	}
	e := newE2E(t, e2eConfig{Script: script})
	const drain = time.Second
	d1 := e.start("--drain-timeout", drain.String())
	id := e.plat.Enqueue(moleculetest.CanvasMessage("hang on"))[0]
	d1.waitHung(1)
	codex := procOf(t, childPID(d1.status(), e.canvasKey()))

	took := d1.stop(stopTimeout)
	t.Logf("exit took %s after SIGTERM (drain timeout %s)", took, drain)
	if took < drain-50*time.Millisecond {
		t.Errorf("exit after %s: the hanging turn was not given the drain time %s", took, drain)
	}
	// After the drain comes the interrupt, which codex honours: the log says so, where a child
	// that ignored it would have been waited for and given up on. (How long the exit took after
	// the drain says nothing more on a loaded machine; stopTimeout only guards against a hang.)
	if len(d1.logsWith("interrupting turn")) == 0 {
		t.Error("the daemon did not interrupt the hanging turn at the end of the drain")
	}
	if l := d1.logsWith("turn ignored turn/interrupt"); len(l) > 0 {
		t.Errorf("codex ignored the interrupt at the end of the drain: %v", l)
	}
	if !codex.gone() {
		t.Errorf("codex child %d still running after the daemon exited", codex.pid)
	}
	if n := e.plat.Deliveries(); n != 0 {
		t.Errorf("%d replies sent for the interrupted message (%q), want none", n, e.notifyTexts())
	}
	st := e.bridgeState()
	if st.Cursor == id || slices.Contains(st.Done, id) || st.pending(id) {
		t.Errorf("state after the drain = %+v: the interrupted row must be neither passed nor pending", st)
	}

	d2 := e.start()
	d2.waitPlatform("the answer after the restart", func() bool { return len(e.plat.Notifies()) == 1 })
	d2.waitPolls(5)
	if got := e.notifyTexts(); len(got) != 1 || !strings.HasPrefix(got[0], "reply #") || !strings.HasSuffix(got[0], ": hang on") {
		t.Errorf("replies = %q, want one answer to the interrupted message", got)
	}
	d2.stop(stopTimeout)
}

// SIGTERM while a turn is running and finishes within the drain time: the daemon lets it finish,
// delivers its reply and moves the cursor past the row before it exits 0.
func TestE2ESigtermLetsRunningTurnFinish(t *testing.T) {
	t.Parallel()
	g := newGate(0)
	script := func(req mockmodel.Request) mockmodel.Reply {
		if !req.HasToolOutput && req.LastUserText == "finish me" {
			g.hold(60 * time.Second)
		}
		return mockmodel.DefaultScript(req)
	}
	e := newE2E(t, e2eConfig{Script: script})
	t.Cleanup(g.release)
	d := e.start("--drain-timeout", "30s")
	id := e.plat.Enqueue(moleculetest.CanvasMessage("finish me"))[0]
	d.waitRequests(1)

	d.signal(syscall.SIGTERM)
	d.waitUntil("the daemon to start draining", func() bool { return len(d.logsWith("signal received; draining")) > 0 })
	polls := e.plat.CountCalls(moleculetest.RouteActivity, 0)
	g.release()
	d.waitExit(stopTimeout)

	if g.timedOut() {
		t.Fatal("the held model request hit its safety timeout")
	}
	if got := e.notifyTexts(); !slices.Equal(got, []string{"reply #1: finish me"}) {
		t.Errorf("replies = %q, want the drained turn's answer", got)
	}
	if st := e.bridgeState(); st.Cursor != id || len(st.Pending) != 0 {
		t.Errorf("state after the drain = %+v, want the cursor at %s and nothing pending", st, id)
	}
	if n := e.plat.CountCalls(moleculetest.RouteActivity, 0); n > polls+1 {
		t.Errorf("%d polls after draining started, want polling stopped", n-polls)
	}
}

// runeIndex is strings.Index counted in runes.
func runeIndex(s []rune, sub string) int {
	i := strings.Index(string(s), sub)
	if i < 0 {
		return -1
	}
	return len([]rune(string(s)[:i]))
}

// A second SIGTERM cuts the drain short: with a hanging turn and a five-minute drain timeout, the
// daemon interrupts the turn at once and exits 0 long before the drain would end, leaves no codex
// child, and does not acknowledge the interrupted message (the next daemon answers it).
func TestE2ESecondSignalStopsAtOnce(t *testing.T) {
	t.Parallel()
	first := firstTime()
	script := func(req mockmodel.Request) mockmodel.Reply {
		if !req.HasToolOutput && req.LastUserText == "hang on" && first("hang on") {
			return mockmodel.Reply{Hang: true}
		}
		return mockmodel.DefaultScript(req)
	}
	e := newE2E(t, e2eConfig{Script: script})
	d1 := e.start("--drain-timeout", "5m")
	id := e.plat.Enqueue(moleculetest.CanvasMessage("hang on"))[0]
	d1.waitHung(1)
	codex := procOf(t, childPID(d1.status(), e.canvasKey()))

	d1.signal(syscall.SIGTERM)
	d1.waitUntil("the daemon to start draining", func() bool { return len(d1.logsWith("signal received; draining")) > 0 })
	d1.signal(syscall.SIGTERM)
	// stopTimeout is a tenth of the drain timeout: exiting within it means the drain was cut.
	d1.waitExit(stopTimeout)
	if len(d1.logsWith("second signal; interrupting running turns now")) == 0 {
		t.Error("the daemon did not log the second signal")
	}
	if !codex.gone() {
		t.Errorf("codex child %d still running after the daemon exited", codex.pid)
	}
	if n := e.plat.Deliveries(); n != 0 {
		t.Errorf("%d replies sent for the interrupted message, want none", n)
	}
	if st := e.bridgeState(); st.Cursor == id || slices.Contains(st.Done, id) || st.pending(id) {
		t.Errorf("state after the cut drain = %+v: the interrupted row must be neither passed nor pending", st)
	}

	d2 := e.start()
	d2.waitPlatform("the answer after the restart", func() bool { return len(e.plat.Notifies()) == 1 })
	if got := e.notifyTexts(); len(got) != 1 || !strings.HasSuffix(got[0], ": hang on") {
		t.Errorf("replies = %q, want one answer to the interrupted message", got)
	}
	d2.stop(stopTimeout)
}

// A state directory that other users can read or enter (it holds the chats' thread ids, the
// inbox position and the control socket) is warned about at start-up, naming its mode; the
// daemon still starts.
func TestE2EStateDirModeWarned(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true})
	if err := os.MkdirAll(e.stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(e.stateDir, 0o751); err != nil {
		t.Fatal(err)
	}
	d := e.start()
	warns := d.logsWith("state directory is accessible to other users")
	if len(warns) != 1 || warns[0].str("mode") != "0751" || warns[0].str("dir") != e.stateDir || warns[0].str("level") != "warn" {
		t.Errorf("warnings = %v, want one warn naming %s and mode 0751", warns, e.stateDir)
	}
	d.stop(stopTimeout)

	if err := os.Chmod(e.stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	d = e.start()
	if warns := d.logsWith("state directory is accessible to other users"); len(warns) != 0 {
		t.Errorf("warned about a 0700 state dir: %v", warns)
	}
	d.stop(stopTimeout)
}
