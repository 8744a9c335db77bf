//go:build linux

package main

// The eight contracts of the Python daemon's (codex-channel-molecule) test suite, shown on the
// real daemon process, the real codex binary, the mock model and the fake Molecule platform
// (docs/PROTOCOL.md section 2).

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// Contract 1: a canvas user's message is answered with POST /workspaces/{ws}/notify to the
// workspace it arrived in, carrying codex's final answer, with the platform headers; nothing
// goes out as A2A.
func TestE2ECanvasMessageRepliesWithNotify(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{})
	d := e.start()
	e.plat.Enqueue(moleculetest.CanvasMessage("hello from the canvas"))
	d.waitPlatform("one notify", func() bool { return len(e.plat.Notifies()) == 1 })

	n := e.plat.Notifies()[0]
	if n.Workspace != e.plat.WorkspaceID() {
		t.Errorf("notify went to workspace %q, want the arrival workspace %q", n.Workspace, e.plat.WorkspaceID())
	}
	if want := "reply #1: hello from the canvas"; n.Message != want {
		t.Errorf("notify message = %q, want codex's answer %q", n.Message, want)
	}
	if got := n.Header.Get("Authorization"); got != "Bearer "+e.plat.Token() {
		t.Errorf("notify Authorization = %q", got)
	}
	if got := n.Header.Get("Origin"); got != e.plat.URL() {
		t.Errorf("notify Origin = %q, want %q", got, e.plat.URL())
	}
	if s := e.plat.A2ASends(); len(s) != 0 {
		t.Errorf("a canvas reply went out as A2A too: %+v", s)
	}
	if got := e.requestsFor("hello from the canvas"); len(got) != 1 {
		t.Errorf("model requests for the message = %d, want 1", len(got))
	}
	d.stop(stopTimeout)
}

// Contract 2: a peer agent's message is answered with an A2A message/send to that peer
// (POST /workspaces/{peer}/a2a) made as this workspace (X-Workspace-ID: self); no notify.
func TestE2EPeerMessageRepliesWithA2ASend(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{})
	d := e.start()
	e.plat.Enqueue(moleculetest.PeerMessage("peer-alpha", "hi from a peer"))
	d.waitPlatform("one A2A send", func() bool { return len(e.plat.A2ASends()) == 1 })

	s := e.plat.A2ASends()[0]
	if s.Peer != "peer-alpha" {
		t.Errorf("A2A send went to %q, want the peer peer-alpha", s.Peer)
	}
	if got := s.Header.Get("X-Workspace-ID"); got != e.plat.WorkspaceID() {
		t.Errorf("X-Workspace-ID = %q, want self %q", got, e.plat.WorkspaceID())
	}
	if s.Method != "message/send" || s.MessageID == "" {
		t.Errorf("A2A send = %+v, want a message/send with a messageId", s)
	}
	if want := "reply #1: hi from a peer"; s.Text != want {
		t.Errorf("A2A text = %q, want %q", s.Text, want)
	}
	if n := e.plat.Notifies(); len(n) != 0 {
		t.Errorf("a peer reply went out as notify too: %+v", n)
	}
	d.stop(stopTimeout)
}

// Contract 3: the second message of a chat continues the same codex thread: the model sees the
// first message as history ("reply #2"), one warm child served both turns, and sessions.json
// maps the chat key to that thread.
func TestE2ESecondMessageContinuesThread(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{})
	d := e.start()
	e.plat.Enqueue(moleculetest.CanvasMessage("first"))
	d.waitPlatform("first notify", func() bool { return len(e.plat.Notifies()) == 1 })
	e.plat.Enqueue(moleculetest.CanvasMessage("second"))
	d.waitPlatform("second notify", func() bool { return len(e.plat.Notifies()) == 2 })

	if got, want := e.notifyTexts(), []string{"reply #1: first", "reply #2: second"}; !slices.Equal(got, want) {
		t.Fatalf("notifies = %q, want %q", got, want)
	}
	reqs := e.requestsFor("second")
	if len(reqs) != 1 || !slices.Equal(reqs[0].UserTexts, []string{"first", "second"}) {
		t.Errorf("second turn's model request = %+v, want history [first second]", reqs)
	}
	children := chatChildren(d.status())
	if len(children) != 1 {
		t.Fatalf("children = %+v, want one child for the chat", children)
	}
	c := children[0]
	thread := e.sessionsFile()[e.canvasKey()]
	if c.ChatKey != e.canvasKey() || c.Turns != 2 || c.ThreadID == "" || c.ThreadID != thread {
		t.Errorf("child = %+v, sessions.json thread %q: want one warm child with 2 turns on the stored thread", c, thread)
	}
	d.stop(stopTimeout)
}

// Contract 4: the chat's thread survives a daemon restart: a new daemon on the same state
// directory resumes the thread sessions.json names ("reply #3" after two turns before the
// restart), and does not answer the earlier messages again.
func TestE2EThreadSurvivesRestart(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{})
	d1 := e.start()
	e.plat.Enqueue(moleculetest.CanvasMessage("one"))
	d1.waitPlatform("first notify", func() bool { return len(e.plat.Notifies()) == 1 })
	e.plat.Enqueue(moleculetest.CanvasMessage("two"))
	d1.waitPlatform("second notify", func() bool { return len(e.plat.Notifies()) == 2 })
	thread := e.sessionsFile()[e.canvasKey()]
	if thread == "" {
		t.Fatalf("sessions.json = %v, want a thread for %s", e.sessionsFile(), e.canvasKey())
	}
	d1.stop(stopTimeout)

	d2 := e.start()
	e.plat.Enqueue(moleculetest.CanvasMessage("three"))
	d2.waitPlatform("third notify", func() bool { return len(e.plat.Notifies()) == 3 })
	if got := e.plat.Notifies()[2].Message; got != "reply #3: three" {
		t.Errorf("first reply after the restart = %q, want %q (the thread's history kept)", got, "reply #3: three")
	}
	if children := chatChildren(d2.status()); len(children) != 1 || children[0].ThreadID != thread {
		t.Errorf("children after restart = %+v, want one on thread %s", children, thread)
	}
	if got := e.sessionsFile()[e.canvasKey()]; got != thread {
		t.Errorf("sessions.json thread after restart = %q, want %q", got, thread)
	}
	d2.waitPolls(5)
	if n := len(e.plat.Notifies()); n != 3 || e.mock.RequestCount() != 3 {
		t.Errorf("after restart: %d notifies and %d model requests, want 3 and 3 (nothing answered twice)", n, e.mock.RequestCount())
	}
	d2.stop(stopTimeout)
}

// Contract 5: polls that bring nothing (empty answers, and a poll that failed as a gateway
// timeout) start no codex: after many polls the status shows no child, the mock model got no
// request and nothing was sent. Spares are off here: a spare is a codex started on purpose before
// any message (--spares), which an operator who wants this contract turns off.
func TestE2EEmptyPollStartsNoCodex(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{})
	e.plat.FailNext(moleculetest.RouteActivity, 1, http.StatusGatewayTimeout)
	d := e.start("--spares", "0")
	d.waitPlatform("10 successful empty polls", func() bool {
		return e.plat.CountCalls(moleculetest.RouteActivity, http.StatusOK) >= 10
	})
	doc := d.status()
	if len(doc.Snapshot.Children) != 0 || doc.Snapshot.Totals.Live != 0 || doc.Snapshot.Totals.Turns != 0 {
		t.Errorf("status after empty polls = %+v, want no children and no turns", doc.Snapshot)
	}
	if n := e.mock.RequestCount(); n != 0 {
		t.Errorf("mock model got %d requests, want 0", n)
	}
	if n := e.plat.Deliveries(); n != 0 {
		t.Errorf("%d replies sent for empty polls", n)
	}
	if n := e.plat.CountCalls(moleculetest.RouteActivity, http.StatusGatewayTimeout); n != 1 {
		t.Errorf("failed polls = %d, want the injected one", n)
	}
	d.stop(stopTimeout)
}

// Contract 6: a reply the platform refuses (502) is not acknowledged: the durable cursor stays
// before the row and the mailbox gets no ack for it while delivery fails; once the platform
// recovers the reply is delivered exactly once, without running codex again (one model request
// for the message), and only then the cursor and the ack pass the row.
func TestE2EFailedReplyNotAckedThenDelivered(t *testing.T) {
	t.Parallel() // mostly waits out the bridge's delivery backoff (1 s initial, not a flag)
	e := newE2E(t, e2eConfig{Platform: moleculetest.Config{AckEnabled: true}})
	const failures = 2
	e.plat.FailNext(moleculetest.RouteNotify, failures, http.StatusBadGateway)
	d := e.start()
	const seq = 41
	id := e.plat.Enqueue(moleculetest.CanvasMessage("deliver me").WithSeq(seq))[0]

	d.waitPlatform("the first failed delivery", func() bool {
		return e.plat.CountCalls(moleculetest.RouteNotify, http.StatusBadGateway) >= 1
	})
	// The reply is stored before its first attempt, so the state file already says so.
	st := e.bridgeState()
	if st.Cursor == id || slices.Contains(st.Done, id) || !st.pending(id) {
		t.Errorf("state while delivery fails = %+v: want the row not passed and its reply pending", st)
	}
	if acks := e.plat.Acks(); slices.ContainsFunc(acks, func(a int64) bool { return a >= seq }) {
		t.Errorf("mailbox acked %v before the reply was delivered", acks)
	}

	d.waitPlatform("the delivered notify", func() bool { return len(e.plat.Notifies()) == 1 })
	d.waitUntil("the cursor to pass the row", func() bool { return d.bridgeStats().Cursor == id })
	d.waitPlatform("the mailbox ack", func() bool { return slices.Contains(e.plat.Acks(), int64(seq)) })
	d.waitPolls(5)

	if got := e.plat.CountCalls(moleculetest.RouteNotify, http.StatusBadGateway); got != failures {
		t.Errorf("failed notify attempts = %d, want %d", got, failures)
	}
	if got := e.plat.CountCalls(moleculetest.RouteNotify, http.StatusOK); got != 1 {
		t.Errorf("successful notifies = %d, want exactly 1", got)
	}
	if got := e.plat.Notifies()[0].Message; got != "reply #1: deliver me" {
		t.Errorf("delivered reply = %q", got)
	}
	if got := e.requestsFor("deliver me"); len(got) != 1 {
		t.Errorf("codex ran %d turns for the message, want 1 (retries must not run codex again)", len(got))
	}
	if st := e.bridgeState(); st.pending(id) {
		t.Errorf("reply still pending after delivery: %+v", st)
	}
	s := d.bridgeStats()
	if s.Delivered != 1 || s.DeliveryRetries != failures || s.Answered != 1 {
		t.Errorf("bridge stats = %+v", s)
	}
	// The text status shows them too, not only --json and the metrics.
	want := fmt.Sprintf("molecule: received 1  answered 1  delivered 1  delivery retries %d  delivery failures 0  pending replies 0  unacked 0", failures)
	if code, out := runStatus(t, "--state-dir", e.stateDir); code != 0 || !strings.Contains(out, want) {
		t.Errorf("status exit %d, output lacks %q:\n%s", code, want, out)
	}
	d.stop(stopTimeout)
}

// Contract 7: a codex failure (the model answers HTTP 500, the turn fails) becomes a visible
// reply that says so with its status, and the chat keeps working afterwards.
func TestE2ECodexFailureBecomesVisibleReply(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{})
	d := e.start()
	e.plat.Enqueue(moleculetest.CanvasMessage("please FAIL now"))
	d.waitPlatform("the failure reply", func() bool { return len(e.plat.Notifies()) == 1 })
	msg := e.plat.Notifies()[0].Message
	if !strings.Contains(msg, "failed") || !strings.Contains(msg, "status failed") {
		t.Errorf("failure reply = %q, want it to say codex failed with status failed", msg)
	}
	if strings.HasPrefix(msg, "reply #") {
		t.Errorf("failure reply = %q looks like a normal answer", msg)
	}
	e.plat.Enqueue(moleculetest.CanvasMessage("and now?"))
	d.waitPlatform("the next reply", func() bool { return len(e.plat.Notifies()) == 2 })
	if got := e.plat.Notifies()[1].Message; !strings.HasPrefix(got, "reply #") || !strings.HasSuffix(got, ": and now?") {
		t.Errorf("reply after the failure = %q, want a normal answer", got)
	}
	// The platform records the notify before the daemon counts it: wait for the count.
	d.waitUntil("2 deliveries counted", func() bool { return d.bridgeStats().Delivered == 2 })
	if s := d.bridgeStats(); s.CodexFailures != 1 || s.Answered != 2 {
		t.Errorf("bridge stats = %+v, want 1 codex failure among 2 answers", s)
	}
	d.stop(stopTimeout)
}

// Contract 8: the text parts of a multipart message are joined with newlines (non-text parts
// ignored) and codex gets that text as one user message.
func TestE2EMultipartTextJoinedWithNewlines(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{})
	d := e.start()
	e.plat.Enqueue(moleculetest.MultipartMessage("", "line one", "line two"))
	d.waitPlatform("the reply", func() bool { return len(e.plat.Notifies()) == 1 })
	reqs := e.mock.Requests()
	if len(reqs) != 1 || reqs[0].LastUserText != "line one\nline two" {
		t.Fatalf("model requests = %d, last user text %q; want one with %q", len(reqs), lastText(reqs), "line one\nline two")
	}
	if got, want := e.plat.Notifies()[0].Message, "reply #1: line one\nline two"; got != want {
		t.Errorf("reply = %q, want %q", got, want)
	}
	d.stop(stopTimeout)
}

func lastText(reqs []mockmodel.Request) string {
	if len(reqs) == 0 {
		return ""
	}
	return reqs[len(reqs)-1].LastUserText
}
