//go:build linux

package main

// Peers and delegation results against a fake platform that serves them as the real one does
// (docs/molecule.md, "Peers and delegation"), with real codex.

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

// A delegation result in the platform's shape (from this workspace, the callee in target_id,
// the text in response_body.text) gets a codex turn in the callee's chat with its text, and
// the answer goes to the canvas; a failed one is told to codex as failed.
func TestE2EDelegationResultInCalleeChat(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{})
	d := e.start()
	ws := e.plat.WorkspaceID()
	e.plat.Enqueue(moleculetest.DelegationResult(ws, "callee-a", "d-1", "the answer is 42"),
		moleculetest.DelegationFailed(ws, "callee-b", "d-2", "target unreachable"))
	d.waitPlatform("two answers on the canvas", func() bool { return len(e.plat.Notifies()) == 2 })
	all := strings.Join(e.notifyTexts(), "\n---\n")
	for _, want := range []string{
		"Result of the work delegated to workspace callee-a (delegation d-1):\n\nthe answer is 42",
		"The work delegated to workspace callee-b (delegation d-2) failed: target unreachable",
	} {
		if !strings.Contains(all, "reply #1: "+want) {
			t.Errorf("no answer to %q among the canvas answers:\n%s", want, all)
		}
	}
	if s := e.plat.A2ASends(); len(s) != 0 {
		t.Fatalf("a delegation result was answered to the callee: %+v", s)
	}
	keys := map[string]bool{}
	for _, c := range chatChildren(d.status()) {
		keys[c.ChatKey] = true
	}
	if !keys["peer:callee-a"] || !keys["peer:callee-b"] || keys["peer:"+ws] {
		t.Fatalf("chats %v, want the callees' chats and none with ourselves", keys)
	}
	d.stop(stopTimeout)
}

// A push peer answers our reply only after its whole turn. With every other platform call
// bounded at 1 s, the send waits: the peer's turn is held until the daemon has polled for three
// times that bound, then released; the reply went once, the peer ran one turn, and its answer
// did not become a message. The send carries X-Timeout.
func TestE2EPushPeerAnswersLate(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{})
	turn := make(chan struct{})
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(turn) }) }) // before the platform closes
	e.plat.SetPeer("peer-push", moleculetest.Peer{Mode: moleculetest.PeerPush, Turn: turn, Answer: "the peer's own answer"})
	d := e.start("--platform-timeout", "1s")
	e.plat.Enqueue(moleculetest.PeerMessage("peer-push", "a long job"))
	d.waitPlatform("the push peer's turn", func() bool { return e.plat.PushTurns("peer-push") == 1 })
	sentAt := e.plat.PeerDeliveries("peer-push")[0].At
	d.waitPlatform("polls 3 s past the send, or a second send", func() bool {
		if e.plat.CountCalls(moleculetest.RouteA2A, 0) > 1 {
			return true
		}
		polls := e.plat.CallsTo(moleculetest.RouteActivity)
		return len(polls) > 0 && polls[len(polls)-1].At.Sub(sentAt) > 3*time.Second
	})
	release.Do(func() { close(turn) })
	d.waitUntil("the reply delivered", func() bool { return d.bridgeStats().Delivered == 1 })
	if n, turns := e.plat.CountCalls(moleculetest.RouteA2A, 0), e.plat.PushTurns("peer-push"); n != 1 || turns != 1 {
		t.Fatalf("%d sends, %d turns of the push peer: want the reply sent once", n, turns)
	}
	if got := e.plat.A2ASends()[0].Header.Get("X-Timeout"); got != "1800" {
		t.Errorf("X-Timeout = %q, want 1800", got)
	}
	if s := d.bridgeStats(); s.DeliveryRetries != 0 || s.Received != 1 {
		t.Errorf("stats %+v: want one message, no retry", s)
	}
	for _, r := range e.mock.Requests() {
		if strings.Contains(r.LastUserText, "the peer's own answer") {
			t.Fatalf("the push peer's answer to our reply reached codex as a message")
		}
	}
	d.stop(stopTimeout)
}

// 202 (the peer is busy and the platform queued the message) is a delivery; a 503 is sent again
// no sooner than its Retry-After.
func TestE2EA2ABusyAnswers(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{})
	e.plat.SetPeer("peer-busy", moleculetest.Peer{Mode: moleculetest.PeerPush})
	e.plat.SetPeer("peer-restarting", moleculetest.Peer{Mode: moleculetest.PeerPoll})
	d := e.start()
	e.plat.BusyQueueNext(1)
	e.plat.Enqueue(moleculetest.PeerMessage("peer-busy", "are you there"))
	d.waitUntil("the queued reply delivered", func() bool { return d.bridgeStats().Delivered == 1 })
	if dl := e.plat.PeerDeliveries("peer-busy"); len(dl) != 1 || dl[0].How != "queued" || e.plat.CountCalls(moleculetest.RouteA2A, 0) != 1 {
		t.Fatalf("deliveries %v: want one, queued, sent once", dl)
	}

	e.plat.FailNextWith(moleculetest.RouteA2A, 1, http.StatusServiceUnavailable, http.Header{"Retry-After": {"2"}})
	e.plat.Enqueue(moleculetest.PeerMessage("peer-restarting", "hello"))
	d.waitUntil("the reply after the 503 delivered", func() bool { return d.bridgeStats().Delivered == 2 })
	var sends []moleculetest.Call
	for _, c := range e.plat.CallsTo(moleculetest.RouteA2A) {
		if strings.Contains(c.Path, "peer-restarting") {
			sends = append(sends, c)
		}
	}
	if len(sends) != 2 || sends[0].Status != http.StatusServiceUnavailable {
		t.Fatalf("%d sends to the restarting peer, want a 503 and one more", len(sends))
	}
	if gap := sends[1].At.Sub(sends[0].At); gap < 2*time.Second {
		t.Fatalf("sent again %v after a 503 with Retry-After: 2", gap)
	}
	d.stop(stopTimeout)
}

// Two agents that would answer each other forever: the peer writes back about every reply it
// takes. The daemon answers its first message and --peer-exchanges answers to its replies in a
// row, then none (logged, counted), and the peer's synchronous answers never reach codex.
func TestE2EPingPongCapped(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{})
	e.plat.SetPeer("peer-echo", moleculetest.Peer{Mode: moleculetest.PeerPush, Echo: "you said: ", Answer: "sync answer"})
	d := e.start("--peer-exchanges", "3")
	e.plat.Enqueue(moleculetest.PeerMessage("peer-echo", "hello"))
	d.waitPlatform("the cap, or more replies than it allows", func() bool { return len(e.plat.A2ASends()) > 1+3 || len(d.logsWith("reached the cap")) > 0 })
	d.waitUntil("the capped message acknowledged", func() bool { s := d.bridgeStats(); return s.PeerCapped == 1 && s.Unacked == 0 })
	d.waitPolls(3)
	if n := len(e.plat.A2ASends()); n != 1+3 {
		t.Fatalf("%d replies to the echoing peer, want 4 (its message and 3 exchanges)", n)
	}
	for _, r := range e.mock.Requests() {
		if strings.Contains(r.LastUserText, "sync answer") {
			t.Fatalf("a push peer's synchronous answer reached codex: %q", r.LastUserText)
		}
	}
	d.stop(stopTimeout)
}
