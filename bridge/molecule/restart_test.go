package molecule

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/platform"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// A restart over the same state directory: a reply that was pending is delivered without running
// codex, a row already answered is not answered again, and a row whose turn was cut off by the
// shutdown is answered.
func TestRestartDeliversPendingWithoutSubmit(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	dir := t.TempDir()
	log, _ := newTestLogger(t)

	a1 := chattest.NewAnswerer(func(ctx context.Context, key, text string) (supervisor.Reply, error) {
		if text == "cut off" {
			<-ctx.Done() // held until the drain period ends
			return supervisor.Reply{}, ctx.Err()
		}
		return chattest.EchoReply(key, text), nil
	})
	cfg1 := testConfig(p, dir, a1, log)
	cfg1.DrainTimeout = 50 * time.Millisecond
	p.FailNext(moleculetest.RouteNotify, 1<<30, 502)
	r1 := start(t, cfg1)
	ids := p.Enqueue(
		moleculetest.CanvasMessage("pending one"),
		moleculetest.PeerMessage("peer-6", "delivered one"),
		moleculetest.PeerMessage("peer-7", "cut off"),
	)
	ctx := waitCtx(t)
	must(t, p.WaitFor(ctx, func() bool {
		return len(p.A2ASends()) == 1 && p.CountCalls(moleculetest.RouteNotify, 502) >= 2
	}))
	must(t, a1.WaitFor(ctx, func() bool { return len(a1.Calls()) == 3 }))
	// The platform accepted the A2A send; wait until the inbox has also recorded it as done.
	must(t, p.WaitFor(ctx, stateCond(t, dir, func(st stateFile) bool { return slices.Contains(st.Done, ids[1]) })))
	st := readState(t, dir)
	if st.Cursor != "" || len(st.Pending) != 1 || st.Pending[0].ActivityID != ids[0] || !slices.Contains(st.Done, ids[1]) {
		t.Fatalf("state before restart = %+v", st)
	}
	must(t, r1.stop())
	if s := r1.m.Stats(); s.Abandoned != 1 {
		t.Errorf("first run stats = %+v, want the cut-off turn counted as abandoned", s)
	}

	p.ClearFailures()
	a2 := chattest.NewAnswerer(nil)
	r2 := start(t, testConfig(p, dir, a2, log))
	// At least once: the first run's last notify attempt, canceled by its shutdown, may still have
	// reached the platform after the failures were cleared. Any copy is the stored reply.
	must(t, p.WaitFor(ctx, func() bool { return len(p.Notifies()) >= 1 && len(p.A2ASends()) == 2 }))
	must(t, p.WaitFor(ctx, statsCond(r2.m, func(s Stats) bool { return s.Cursor == ids[2] })))

	for _, n := range p.Notifies() {
		if n.Message != "echo: pending one" {
			t.Errorf("recovered reply = %q", n.Message)
		}
	}
	calls := a2.Calls()
	if len(calls) != 1 || calls[0].Text != "cut off" {
		t.Fatalf("second run Submits = %+v, want only the cut-off message", calls)
	}
	if sends := p.A2ASends(); sends[0].Peer != "peer-6" || sends[1].Peer != "peer-7" {
		t.Errorf("a2a sends = %+v", sends)
	}
	if s := r2.m.Stats(); s.Recovered != 1 || s.Received != 1 {
		t.Errorf("second run stats = %+v", s)
	}
	must(t, r2.stop())
	if st := readState(t, dir); st.Cursor != ids[2] || len(st.Pending) != 0 {
		t.Fatalf("final state = %+v", st)
	}
}

// A reply stored before delivery survives a crash: a run whose delivery never got through
// leaves it pending with a stable A2A messageId; the next run delivers it with that id.
func TestPendingPeerReplyKeepsMessageID(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	dir := t.TempDir()
	log, _ := newTestLogger(t)
	p.FailNext(moleculetest.RouteA2A, 1<<30, 503)
	cfg1 := testConfig(p, dir, chattest.NewAnswerer(nil), log)
	cfg1.DrainTimeout = 50 * time.Millisecond // the delivery keeps failing: stop retrying soon
	r1 := start(t, cfg1)
	p.Enqueue(moleculetest.PeerMessage("peer-8", "hi"))
	ctx := waitCtx(t)
	must(t, p.WaitFor(ctx, func() bool { return p.CountCalls(moleculetest.RouteA2A, 503) >= 2 }))
	must(t, r1.stop())
	st := readState(t, dir)
	if len(st.Pending) != 1 {
		t.Fatalf("pending = %+v", st.Pending)
	}

	p.ClearFailures()
	a2 := chattest.NewAnswerer(nil)
	start(t, testConfig(p, dir, a2, log))
	must(t, p.WaitFor(ctx, func() bool { return len(p.A2ASends()) >= 1 }))
	// A send canceled by the first run's shutdown may have reached the platform late: every copy
	// carries the same messageId, which is what lets the peer drop duplicates.
	for _, s := range p.A2ASends() {
		if s.MessageID != st.Pending[0].MessageID {
			t.Errorf("messageId %q, want the stored %q", s.MessageID, st.Pending[0].MessageID)
		}
	}
	if len(a2.Calls()) != 0 {
		t.Errorf("codex ran again: %+v", a2.Calls())
	}
}

// On shutdown, a turn in flight finishes within the drain period and its reply is delivered
// before Run returns.
func TestShutdownDrainsInFlightTurn(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	g := chattest.NewGate()
	a := chattest.GatedAnswerer(g)
	log, _ := newTestLogger(t)
	dir := t.TempDir()
	cfg := testConfig(p, dir, a, log)
	// Run must return because the turn and its delivery finished, never because the drain
	// period ran out first on a slow machine: stop's bound is what fails a Run that hangs.
	cfg.DrainTimeout = time.Hour
	r := start(t, cfg)
	ids := p.Enqueue(moleculetest.CanvasMessage("finish me"))
	must(t, a.WaitFor(waitCtx(t), func() bool { return len(a.Calls()) == 1 }))

	r.cancel()
	g.Open()
	must(t, r.stop())
	if n := len(p.Notifies()); n != 1 {
		t.Fatalf("%d notifies after drain, want 1", n)
	}
	if st := readState(t, dir); st.Cursor != ids[0] {
		t.Fatalf("cursor %q after drain, want %q", st.Cursor, ids[0])
	}
}

// A state file written before reply ids were derived from the activity holds a random messageId:
// it is read as before, and the reply goes out with that messageId (a peer may have seen it) and
// the activity's Idempotency-Key.
func TestOldStateFileRandomMessageIDKept(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	dir := t.TempDir()
	const oldID = "3f8a1c52-7d4e-4b6a-9c0d-2e5f7a8b9c1d"
	old := `{"version":1,"workspace_id":"` + p.WorkspaceID() + `","cursor":"","done":[],"pending":[` +
		`{"activity_id":"act-old","chat_key":"peer:peer-1","route":{"kind":"a2a","workspace":"peer-1"},"text":"old reply",` +
		`"message_id":"` + oldID + `","answered_at":"2026-01-01T00:00:00Z"}],"saved_at":"2026-01-01T00:00:01Z"}`
	must(t, os.WriteFile(filepath.Join(dir, StateFileName), []byte(old), 0o600))
	log, _ := newTestLogger(t)
	a := chattest.NewAnswerer(nil)
	r := start(t, testConfig(p, dir, a, log))
	must(t, p.WaitFor(waitCtx(t), statsCond(r.m, func(s Stats) bool { return s.Delivered == 1 })))
	s := p.A2ASends()[0]
	if s.MessageID != oldID || s.Text != "old reply" {
		t.Errorf("send = %+v, want the stored reply with messageId %s", s, oldID)
	}
	if got, want := s.Header.Get("Idempotency-Key"), platform.ReplyID(p.WorkspaceID(), "act-old"); got != want {
		t.Errorf("Idempotency-Key = %q, want %q", got, want)
	}
	if len(a.Calls()) != 0 {
		t.Errorf("codex ran for a stored reply: %+v", a.Calls())
	}
}
