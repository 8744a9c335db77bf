package molecule

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/ledger"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

// deliveryIDs are the ids a delivery attempt carried: its Idempotency-Key header and, for an A2A
// send, the messageId.
type deliveryIDs struct {
	key, messageID string
}

// attemptsByText groups the recorded delivery attempts of route (failed ones too) by the reply
// text they carried.
func attemptsByText(t *testing.T, p *moleculetest.Platform, route moleculetest.Route) map[string][]deliveryIDs {
	t.Helper()
	out := map[string][]deliveryIDs{}
	for _, c := range p.CallsTo(route) {
		text, messageID, ok := c.Reply()
		if !ok {
			t.Fatalf("recorded %s call does not decode: %s", route, c.Body)
		}
		out[text] = append(out[text], deliveryIDs{key: c.Header.Get("Idempotency-Key"), messageID: messageID})
	}
	return out
}

// sameIDs checks that every attempt carried the same non-empty ids and returns them.
func sameIDs(t *testing.T, what string, attempts []deliveryIDs, wantAttempts int, a2a bool) deliveryIDs {
	t.Helper()
	if len(attempts) != wantAttempts {
		t.Fatalf("%s: %d delivery attempts, want %d", what, len(attempts), wantAttempts)
	}
	first := attempts[0]
	for i, at := range attempts[1:] {
		if at != first {
			t.Fatalf("%s: attempt %d carried %+v, the first %+v: want the same ids on every attempt", what, i+2, at, first)
		}
	}
	if first.key == "" || (a2a && first.messageID == "") {
		t.Fatalf("%s: attempts carried Idempotency-Key %q, messageId %q; want both set", what, first.key, first.messageID)
	}
	return first
}

// Every delivery attempt of one reply carries the same Idempotency-Key (and, to a peer, the same
// messageId), so the platform can drop a copy it already stored; replies to different activities
// carry different ones.
func TestIdempotencyKeyStableAcrossRetries(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	a := chattest.NewAnswerer(nil)
	log, _ := newTestLogger(t)
	r := start(t, testConfig(p, t.TempDir(), a, log))
	p.FailNext(moleculetest.RouteNotify, 1, 502)
	p.FailNext(moleculetest.RouteA2A, 1, 503)

	p.Enqueue(moleculetest.CanvasMessage("c1"), moleculetest.PeerMessage("peer-1", "p1"),
		moleculetest.CanvasMessage("c2"), moleculetest.PeerMessage("peer-1", "p2"))
	must(t, p.WaitFor(waitCtx(t), statsCond(r.m, func(s Stats) bool { return s.Delivered == 4 })))

	notifies, sends := attemptsByText(t, p, moleculetest.RouteNotify), attemptsByText(t, p, moleculetest.RouteA2A)
	c1 := sameIDs(t, "c1", notifies["echo: c1"], 2, false)
	c2 := sameIDs(t, "c2", notifies["echo: c2"], 1, false)
	p1 := sameIDs(t, "p1", sends["echo: p1"], 2, true)
	p2 := sameIDs(t, "p2", sends["echo: p2"], 1, true)
	owner := map[string]string{} // id → the reply that carried it
	for name, ids := range map[string]deliveryIDs{"c1": c1, "c2": c2, "p1": p1, "p2": p2} {
		for _, id := range []string{ids.key, ids.messageID} {
			if other, taken := owner[id]; id != "" && taken && other != name {
				t.Errorf("replies %s and %s share the id %q", name, other, id)
			}
			owner[id] = name
		}
	}
}

// A reply that reached the platform but was never recorded as delivered (here the state file
// could not be written, as after a crash right after the 2xx) is answered and sent again by the
// next run: the copy carries the same Idempotency-Key and messageId, so the platform and the peer
// can tell it is the same reply.
func TestReplyIDsStableAcrossRestart(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	log, _ := newTestLogger(t)
	dir := t.TempDir()
	path, donePath := filepath.Join(dir, StateFileName), filepath.Join(dir, ledger.DoneLogFileName)
	r1 := start(t, testConfig(p, dir, chattest.NewAnswerer(nil), log))
	for _, f := range []string{path, donePath} { // neither the state nor the finished ids
		must(t, os.RemoveAll(f))
		must(t, os.MkdirAll(filepath.Join(f, "blocker"), 0o700))
	}
	p.Enqueue(moleculetest.CanvasMessage("c"), moleculetest.PeerMessage("peer-1", "p"))
	ctx := waitCtx(t)
	must(t, p.WaitFor(ctx, statsCond(r1.m, func(s Stats) bool { return s.Delivered == 2 })))
	must(t, r1.stop())
	must(t, os.RemoveAll(path))
	must(t, os.RemoveAll(donePath))

	r2 := start(t, testConfig(p, dir, chattest.NewAnswerer(nil), log))
	must(t, p.WaitFor(ctx, statsCond(r2.m, func(s Stats) bool { return s.Delivered == 2 })))
	sameIDs(t, "peer reply", attemptsByText(t, p, moleculetest.RouteA2A)["echo: p"], 2, true)
	sameIDs(t, "canvas reply", attemptsByText(t, p, moleculetest.RouteNotify)["echo: c"], 2, false)
}
