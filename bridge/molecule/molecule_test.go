package molecule

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/platform"
	"github.com/molecule-ai/codex-warm/supervisor"
)

var (
	uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	uuidV5 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
)

// Python contract: a canvas message is answered with /notify to the workspace it arrived at, with
// the platform headers, after register.
func TestCanvasMessageRepliesWithNotify(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	a := chattest.NewAnswerer(nil)
	log, _ := newTestLogger(t)
	r := start(t, testConfig(p, t.TempDir(), a, log))

	ids := p.Enqueue(moleculetest.CanvasMessage("hello there"))
	must(t, p.WaitFor(waitCtx(t), func() bool { return len(p.Notifies()) == 1 }))

	n := p.Notifies()[0]
	if n.Workspace != p.WorkspaceID() || n.Message != "echo: hello there" {
		t.Fatalf("notify = %+v", n)
	}
	for h, want := range map[string]string{
		"Authorization":     "Bearer " + p.Token(),
		"Origin":            p.URL(),
		"X-Molecule-Org-Id": "org-7",
	} {
		if got := n.Header.Get(h); got != want {
			t.Errorf("notify header %s = %q, want %q", h, got, want)
		}
	}
	if got := n.Header.Get("X-Workspace-ID"); got != "" {
		t.Errorf("notify carries X-Workspace-ID %q; only A2A sends do", got)
	}
	if calls := a.Calls(); len(calls) != 1 || calls[0].Key != "canvas:"+p.WorkspaceID() || calls[0].Text != "hello there" {
		t.Fatalf("Submit calls = %+v", calls)
	}
	// Register came before the first poll.
	calls := p.Calls()
	if calls[0].Route != moleculetest.RouteRegister || len(p.Registers()) != 1 {
		t.Fatalf("first call = %s, want register", calls[0].Route)
	}
	reg := p.Registers()[0]
	if reg["url"] != "" || reg["agent_card"].(map[string]any)["name"] != DefaultAgentName {
		t.Errorf("register body = %v", reg)
	}
	must(t, p.WaitFor(waitCtx(t), stateCond(t, r.m.cfg.StateDir, func(st stateFile) bool { return st.Cursor == ids[0] })))
	if st := readState(t, r.m.cfg.StateDir); len(st.Pending) != 0 {
		t.Fatalf("state = %+v, want nothing pending", st)
	}
	s := r.m.Stats()
	if s.Received != 1 || s.Answered != 1 || s.Delivered != 1 || s.DeliveryRetries != 0 {
		t.Errorf("stats = %+v", s)
	}
}

// Python contract: a peer message is answered with an A2A message/send to the peer, sent as this
// workspace (X-Workspace-ID), with uuid ids.
func TestPeerMessageRepliesWithA2ASend(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	a := chattest.NewAnswerer(nil)
	log, _ := newTestLogger(t)
	start(t, testConfig(p, t.TempDir(), a, log))

	ids := p.Enqueue(moleculetest.PeerMessage("peer-1", "status?"))
	must(t, p.WaitFor(waitCtx(t), func() bool { return len(p.A2ASends()) == 1 }))

	s := p.A2ASends()[0]
	if s.Peer != "peer-1" || s.Text != "echo: status?" || s.Method != "message/send" || s.Role != "user" {
		t.Fatalf("a2a send = %+v", s)
	}
	if got := s.Header.Get("X-Workspace-ID"); got != p.WorkspaceID() {
		t.Errorf("X-Workspace-ID = %q, want %q", got, p.WorkspaceID())
	}
	if got := s.Header.Get("Authorization"); got != "Bearer "+p.Token() {
		t.Errorf("Authorization = %q", got)
	}
	if !uuidV4.MatchString(s.RPCID) || !uuidV5.MatchString(s.MessageID) || s.MessageID != platform.ReplyID(p.WorkspaceID(), ids[0]) {
		t.Errorf("ids rpc=%q message=%q, want a random v4 uuid and the reply id (v5) of the activity", s.RPCID, s.MessageID)
	}
	if got := s.Header.Get("Idempotency-Key"); got != s.MessageID {
		t.Errorf("Idempotency-Key = %q, want the messageId %q", got, s.MessageID)
	}
	if calls := a.Calls(); len(calls) != 1 || calls[0].Key != "peer:peer-1" {
		t.Fatalf("Submit calls = %+v", calls)
	}
	if len(p.Notifies()) != 0 {
		t.Fatalf("peer message answered with notify: %+v", p.Notifies())
	}
}

// Python contract: a chat's second message uses the same chat key (so the same codex thread).
func TestSecondMessageSameChatKey(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	a := chattest.NewAnswerer(nil)
	log, _ := newTestLogger(t)
	start(t, testConfig(p, t.TempDir(), a, log))

	p.Enqueue(moleculetest.PeerMessage("peer-2", "one"))
	must(t, p.WaitFor(waitCtx(t), func() bool { return len(p.A2ASends()) == 1 }))
	p.Enqueue(moleculetest.PeerMessage("peer-2", "two"), moleculetest.CanvasMessage("c1"), moleculetest.CanvasMessage("c2"))
	must(t, p.WaitFor(waitCtx(t), func() bool { return p.Deliveries() == 4 }))

	keys := map[string][]string{}
	for _, c := range a.Calls() {
		keys[c.Key] = append(keys[c.Key], c.Text)
	}
	if got := keys["peer:peer-2"]; len(got) != 2 || got[0] != "one" || got[1] != "two" {
		t.Errorf("peer:peer-2 got %v", got)
	}
	if got := keys["canvas:"+p.WorkspaceID()]; len(got) != 2 || got[0] != "c1" || got[1] != "c2" {
		t.Errorf("canvas key got %v", got)
	}
}

// Python contract: an empty poll never starts codex.
func TestEmptyPollDoesNotSubmit(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	a := chattest.NewAnswerer(nil)
	log, _ := newTestLogger(t)
	start(t, testConfig(p, t.TempDir(), a, log))

	must(t, p.WaitFor(waitCtx(t), func() bool { return p.CountCalls(moleculetest.RouteActivity, 200) >= 5 }))
	if calls := a.Calls(); len(calls) != 0 {
		t.Fatalf("Submit called on empty polls: %+v", calls)
	}
	first := p.CallsTo(moleculetest.RouteActivity)[0]
	if first.Query.Get("since_secs") != "600" || first.Query.Has("since_id") || first.Query.Get("include") != "peer_info" {
		t.Errorf("first poll query = %v, want since_secs=600 without a cursor", first.Query)
	}
}

// Python contract: a reply that fails is not acknowledged (the durable cursor stays before it,
// the reply is kept); beyond Python: once the platform recovers it is delivered WITHOUT running
// codex again.
func TestFailedReplyNotAckedThenDeliveredWithoutResubmit(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	a := chattest.NewAnswerer(nil)
	log, _ := newTestLogger(t)
	dir := t.TempDir()
	r := start(t, testConfig(p, dir, a, log))

	p.FailNext(moleculetest.RouteNotify, 1<<30, 502)
	ids := p.Enqueue(moleculetest.CanvasMessage("will fail first"))
	must(t, p.WaitFor(waitCtx(t), func() bool { return p.CountCalls(moleculetest.RouteNotify, 502) >= 3 }))

	st := readState(t, dir)
	if st.Cursor != "" {
		t.Fatalf("cursor moved to %q past an undelivered reply", st.Cursor)
	}
	if len(st.Pending) != 1 || st.Pending[0].ActivityID != ids[0] || st.Pending[0].Text != "echo: will fail first" {
		t.Fatalf("pending = %+v, want the reply kept", st.Pending)
	}
	if s := r.m.Stats(); s.Cursor != "" || s.DeliveryRetries < 2 || s.PendingReplies != 1 {
		t.Fatalf("stats = %+v", s)
	}

	p.ClearFailures()
	must(t, p.WaitFor(waitCtx(t), func() bool { return len(p.Notifies()) == 1 }))
	must(t, p.WaitFor(waitCtx(t), stateCond(t, dir, func(st stateFile) bool { return st.Cursor == ids[0] })))
	if n := len(a.Calls()); n != 1 {
		t.Fatalf("Submit called %d times, want 1 (retries must not run codex again)", n)
	}
	if st := readState(t, dir); st.Cursor != ids[0] || len(st.Pending) != 0 {
		t.Fatalf("state after delivery = %+v", st)
	}
}

// Python contract: a codex failure becomes a visible reply that includes its status.
func TestCodexFailureBecomesVisibleReply(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	a := chattest.NewAnswerer(func(_ context.Context, key, text string) (supervisor.Reply, error) {
		switch text {
		case "fail":
			return supervisor.Reply{ChatKey: key, Status: "failed", Error: "model returned HTTP 500"}, nil
		case "wedge":
			return supervisor.Reply{}, &supervisor.WatchdogError{ChatKey: key, Watchdog: supervisor.WatchdogTurn, PID: 9, Err: errors.New("deadline")}
		case "busy":
			return supervisor.Reply{}, fmt.Errorf("chat %s: %w", key, supervisor.ErrQueueFull)
		}
		return chattest.EchoReply(key, text), nil
	})
	log, _ := newTestLogger(t)
	r := start(t, testConfig(p, t.TempDir(), a, log))

	p.Enqueue(moleculetest.CanvasMessage("fail"), moleculetest.CanvasMessage("wedge"), moleculetest.CanvasMessage("busy"))
	must(t, p.WaitFor(waitCtx(t), statsCond(r.m, func(s Stats) bool { return s.Delivered == 3 })))
	got := p.Notifies()
	for i, want := range []string{
		"codex failed (status failed): model returned HTTP 500",
		"stopped (turn_deadline)",
		"busy",
	} {
		if !strings.Contains(got[i].Message, want) {
			t.Errorf("reply %d = %q, want it to contain %q", i, got[i].Message, want)
		}
	}
	if s := r.m.Stats(); s.CodexFailures != 3 || s.Delivered != 3 {
		t.Errorf("stats = %+v", s)
	}
}

// Python contract: multipart text is joined with newlines (non-text parts ignored).
func TestMultipartTextJoinedWithNewlines(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	a := chattest.NewAnswerer(nil)
	log, _ := newTestLogger(t)
	start(t, testConfig(p, t.TempDir(), a, log))

	p.Enqueue(moleculetest.MultipartMessage("peer-3", "first line", "second line", "third"))
	must(t, p.WaitFor(waitCtx(t), func() bool { return len(p.A2ASends()) == 1 }))
	if calls := a.Calls(); len(calls) != 1 || calls[0].Text != "first line\nsecond line\nthird" {
		t.Fatalf("Submit text = %q", calls)
	}
}

// Five chats run in parallel: the answerer holds every turn until all five are in flight, which
// only happens if the inbox does not serialize across chat keys. Within one chat, order holds.
func TestChatsRunInParallelAndInOrder(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	const chats = 5
	var a *chattest.Answerer
	a = chattest.NewAnswerer(func(ctx context.Context, key, text string) (supervisor.Reply, error) {
		if strings.HasSuffix(text, "#0") {
			// Barrier: the first message of every chat waits until all chats are in flight.
			if err := a.WaitFor(ctx, func() bool { _, most, _, _ := a.Snapshot(); return most >= chats }); err != nil {
				return supervisor.Reply{}, err
			}
		}
		return chattest.EchoReply(key, text), nil
	})
	log, _ := newTestLogger(t)
	start(t, testConfig(p, t.TempDir(), a, log))

	var rows []moleculetest.Row
	for i := range 3 {
		for c := range chats {
			rows = append(rows, moleculetest.PeerMessage(fmt.Sprintf("peer-%d", c), fmt.Sprintf("m#%d", i)))
		}
	}
	p.Enqueue(rows...)
	ctx := waitCtx(t)
	must(t, p.WaitFor(ctx, func() bool { return len(p.A2ASends()) == 3*chats }))

	_, maxTotal, maxPerKey, _ := a.Snapshot()
	if maxTotal < chats {
		t.Errorf("max concurrent Submits = %d, want %d", maxTotal, chats)
	}
	if maxPerKey != 1 {
		t.Errorf("max concurrent Submits of one chat = %d, want 1", maxPerKey)
	}
	perPeer := map[string][]string{}
	for _, s := range p.A2ASends() {
		perPeer[s.Peer] = append(perPeer[s.Peer], s.Text)
	}
	for c := range chats {
		got := perPeer[fmt.Sprintf("peer-%d", c)]
		if strings.Join(got, ",") != "echo: m#0,echo: m#1,echo: m#2" {
			t.Errorf("peer-%d replies = %v, want in order", c, got)
		}
	}
}

// A row seen again while its turn is in flight is answered once: in the same page, and again
// after a cursor reset (410) while the turn still runs.
func TestDuplicateRowWhileInFlightProcessedOnce(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	g := chattest.NewGate()
	a := chattest.GatedAnswerer(g)
	log, _ := newTestLogger(t)
	r := start(t, testConfig(p, t.TempDir(), a, log))

	row := moleculetest.CanvasMessage("once").WithID("dup-1")
	p.Enqueue(row, row)
	ctx := waitCtx(t)
	must(t, a.WaitFor(ctx, func() bool { return len(a.Calls()) == 1 }))
	must(t, p.WaitFor(ctx, statsCond(r.m, func(s Stats) bool { return s.Duplicates >= 1 })))
	// A cursor reset makes the platform send the row again while it is still in flight.
	p.GoneNext()
	must(t, p.WaitFor(ctx, statsCond(r.m, func(s Stats) bool { return s.Duplicates >= 2 })))
	g.Open()
	must(t, p.WaitFor(ctx, func() bool { return len(p.Notifies()) == 1 }))
	must(t, p.WaitFor(ctx, statsCond(r.m, func(s Stats) bool { return s.Cursor == "dup-1" })))
	if n := len(a.Calls()); n != 1 {
		t.Fatalf("Submit called %d times for one row", n)
	}
	if n := len(p.Notifies()); n != 1 {
		t.Fatalf("%d notifies for one row", n)
	}
}

// 410 Gone drops the cursor: the next poll uses since_secs=600, its newest-first page is read
// oldest first, and rows already answered are not answered again.
func TestCursorGoneFallsBackToRecentWindow(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	a := chattest.NewAnswerer(nil)
	log, _ := newTestLogger(t)
	r := start(t, testConfig(p, t.TempDir(), a, log))

	p.Enqueue(moleculetest.PeerMessage("peer-9", "a"))
	ctx := waitCtx(t)
	must(t, p.WaitFor(ctx, func() bool { return len(p.A2ASends()) == 1 }))
	must(t, p.WaitFor(ctx, func() bool {
		c := p.CallsTo(moleculetest.RouteActivity)
		return len(c) > 0 && c[len(c)-1].Query.Has("since_id")
	}))
	p.GoneNext()
	p.Enqueue(moleculetest.PeerMessage("peer-9", "b"), moleculetest.PeerMessage("peer-9", "c"))
	must(t, p.WaitFor(ctx, func() bool { return len(p.A2ASends()) == 3 }))

	var texts []string
	for _, c := range a.Calls() {
		texts = append(texts, c.Text)
	}
	if strings.Join(texts, ",") != "a,b,c" {
		t.Fatalf("Submits = %v, want a,b,c (each once, oldest first)", texts)
	}
	calls := p.CallsTo(moleculetest.RouteActivity)
	gone := -1
	for i, c := range calls {
		if c.Status == 410 {
			gone = i
			break
		}
	}
	if gone < 0 || gone+1 >= len(calls) {
		t.Fatalf("no poll after a 410: %d polls", len(calls))
	}
	if next := calls[gone+1].Query; next.Get("since_secs") != "600" || next.Has("since_id") {
		t.Fatalf("poll after 410 = %v, want since_secs=600", next)
	}
	if s := r.m.Stats(); s.Duplicates < 1 {
		t.Errorf("stats = %+v: the re-sent row a should count as a duplicate", s)
	}
}

// Poison rows are logged with their id, counted and moved past; echoes of our own replies are
// skipped; the next good row is answered and the cursor moves past everything.
func TestPoisonAndEchoRowsMovedPast(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{EchoNotifies: true})
	a := chattest.NewAnswerer(nil)
	log, logs := newTestLogger(t)
	r := start(t, testConfig(p, t.TempDir(), a, log))

	p.EnqueueRaw(
		`{"activity_type":"a2a_receive","method":"message/send","summary":"no id"}`,
		`"just a string"`,
		`{"id":"p-kind","activity_type":"task_update","summary":"x"}`,
		`{"id":"p-peer","activity_type":"a2a_receive","method":"message/send","source_id":"Not/A/Workspace","summary":"hi"}`,
		`{"id":"p-empty","activity_type":"a2a_receive","method":"message/send","request_body":{"params":{"message":{"parts":[]}}}}`,
	)
	p.Enqueue(moleculetest.SelfMessage(p.WorkspaceID(), "my own"))
	ids := p.Enqueue(moleculetest.CanvasMessage("good"))
	ctx := waitCtx(t)
	must(t, p.WaitFor(ctx, func() bool { return len(p.Notifies()) == 1 }))
	// The notify is echoed into the feed; the inbox must skip it and move the cursor past it.
	must(t, p.WaitFor(ctx, statsCond(r.m, func(s Stats) bool { return s.SkippedEchoes == 2 && s.Cursor != ids[0] && s.Cursor != "" })))

	if calls := a.Calls(); len(calls) != 1 || calls[0].Text != "good" {
		t.Fatalf("Submit calls = %+v", calls)
	}
	s := r.m.Stats()
	if s.Poison != 5 {
		t.Errorf("poison = %d, want 5 (%+v)", s.Poison, s)
	}
	logged := map[string]bool{}
	for _, e := range logs.FilterMessageSnippet("poison row").All() {
		logged[e.ContextMap()["activity_id"].(string)] = true
	}
	for _, id := range []string{"p-kind", "p-peer", "p-empty"} {
		if !logged[id] {
			t.Errorf("poison row %s not logged with its id (logged: %v)", id, logged)
		}
	}
}

// Oversized text is capped with a note, not a crash.
func TestOversizedTextCapped(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	a := chattest.NewAnswerer(nil)
	log, _ := newTestLogger(t)
	cfg := testConfig(p, t.TempDir(), a, log)
	cfg.MaxTextBytes = 1024
	r := start(t, cfg)

	p.Enqueue(moleculetest.CanvasMessage(strings.Repeat("é", 5000)))
	must(t, p.WaitFor(waitCtx(t), func() bool { return len(p.Notifies()) == 1 }))
	text := a.Calls()[0].Text
	if len(text) > 1024 || !strings.Contains(text, "[message truncated: ") {
		t.Fatalf("text (%d bytes) not capped with a note: ...%q", len(text), text[max(0, len(text)-60):])
	}
	if s := r.m.Stats(); s.Truncated != 1 {
		t.Errorf("truncated = %d", s.Truncated)
	}
}

// Rows that carry a mailbox seq are acknowledged with the highest seq behind the cursor.
func TestAckSeqAfterDelivery(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{AckEnabled: true})
	a := chattest.NewAnswerer(nil)
	log, _ := newTestLogger(t)
	start(t, testConfig(p, t.TempDir(), a, log))

	p.Enqueue(moleculetest.CanvasMessage("x").WithSeq(41), moleculetest.PeerMessage("peer-4", "y").WithSeq(42))
	must(t, p.WaitFor(waitCtx(t), func() bool { acks := p.Acks(); return len(acks) > 0 && acks[len(acks)-1] == 42 }))
}

// A platform without mailbox answers ack with 404: the inbox stops acking and carries on.
func TestAck404Ignored(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{AckEnabled: false})
	a := chattest.NewAnswerer(nil)
	log, _ := newTestLogger(t)
	start(t, testConfig(p, t.TempDir(), a, log))

	p.Enqueue(moleculetest.CanvasMessage("x").WithSeq(1))
	ctx := waitCtx(t)
	must(t, p.WaitFor(ctx, func() bool { return p.CountCalls(moleculetest.RouteAck, 404) == 1 }))
	p.Enqueue(moleculetest.CanvasMessage("y").WithSeq(2))
	must(t, p.WaitFor(ctx, func() bool { return len(p.Notifies()) == 2 }))
	if n := p.CountCalls(moleculetest.RouteAck, 0); n != 1 {
		t.Fatalf("%d ack calls after a 404, want 1", n)
	}
}

// 403 talk_to_user_disabled is permanent: logged, counted, the message is finished (no retry
// loop) and later messages go on.
func TestPermanentDeliveryFailureIsPoisonReply(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	a := chattest.NewAnswerer(nil)
	log, logs := newTestLogger(t)
	r := start(t, testConfig(p, t.TempDir(), a, log))

	p.FailNext(moleculetest.RouteNotify, 1, 403)
	ids := p.Enqueue(moleculetest.CanvasMessage("first"), moleculetest.CanvasMessage("second"))
	must(t, p.WaitFor(waitCtx(t), func() bool { return len(p.Notifies()) == 1 }))
	must(t, p.WaitFor(waitCtx(t), statsCond(r.m, func(s Stats) bool { return s.Cursor == ids[1] })))
	if got := p.Notifies()[0].Message; got != "echo: second" {
		t.Fatalf("delivered %q", got)
	}
	s := r.m.Stats()
	if s.DeliveryFailed != 1 || s.DeliveryRetries != 0 || p.CountCalls(moleculetest.RouteNotify, 403) != 1 {
		t.Fatalf("stats = %+v", s)
	}
	if logs.FilterMessageSnippet("refused the reply for good").Len() != 1 {
		t.Errorf("permanent failure not logged")
	}
}

// The platform rejecting the token at register is fatal with a clear error; nothing is polled.
func TestRegisterUnauthorizedIsFatal(t *testing.T) {
	t.Parallel()
	for _, status := range []int{401, 403} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			p := moleculetest.NewPlatform(t, moleculetest.Config{})
			p.FailNext(moleculetest.RouteRegister, 1, status)
			log, _ := newTestLogger(t)
			m, err := New(testConfig(p, t.TempDir(), chattest.NewAnswerer(nil), log))
			must(t, err)
			err = m.Run(waitCtx(t))
			if !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "MOLECULE_WORKSPACE_TOKEN") {
				t.Fatalf("Run = %v, want ErrUnauthorized naming the token variable", err)
			}
			if n := p.CountCalls(moleculetest.RouteActivity, 0); n != 0 {
				t.Fatalf("%d polls after a rejected register", n)
			}
		})
	}
}

// A wrong token: the fake platform answers 401 to register.
func TestWrongTokenRejected(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	log, _ := newTestLogger(t)
	cfg := testConfig(p, t.TempDir(), chattest.NewAnswerer(nil), log)
	cfg.Token = "not-the-token"
	m, err := New(cfg)
	must(t, err)
	if err := m.Run(waitCtx(t)); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("Run = %v, want ErrUnauthorized", err)
	}
}

// Register retries transient failures (the platform may be starting).
func TestRegisterRetriesTransientFailures(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	p.FailNext(moleculetest.RouteRegister, 2, 503)
	a := chattest.NewAnswerer(nil)
	log, _ := newTestLogger(t)
	start(t, testConfig(p, t.TempDir(), a, log))
	p.Enqueue(moleculetest.CanvasMessage("after retries"))
	must(t, p.WaitFor(waitCtx(t), func() bool { return len(p.Notifies()) == 1 }))
	if n := p.CountCalls(moleculetest.RouteRegister, 0); n != 3 {
		t.Fatalf("%d register calls, want 3", n)
	}
}

// Heartbeats carry the fields the platform expects, with the running turn.
func TestHeartbeatReportsActiveTask(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	g := chattest.NewGate()
	a := chattest.GatedAnswerer(g)
	log, _ := newTestLogger(t)
	cfg := testConfig(p, t.TempDir(), a, log)
	cfg.HeartbeatInterval = 10 * cfg.PollInterval
	start(t, cfg)
	defer g.Open()

	p.Enqueue(moleculetest.PeerMessage("peer-5", "slow"))
	ctx := waitCtx(t)
	must(t, a.WaitFor(ctx, func() bool { return len(a.Calls()) == 1 }))
	must(t, p.WaitFor(ctx, func() bool {
		for _, hb := range p.Heartbeats() {
			if hb["active_tasks"] == float64(1) && hb["current_task"] == "answering peer:peer-5" {
				return true
			}
		}
		return false
	}))
	hb := p.Heartbeats()[0]
	if hb["workspace_id"] != p.WorkspaceID() {
		t.Errorf("heartbeat = %v", hb)
	}
}

// fakeProgress is a ProgressSource with fixed activities.
type fakeProgress []supervisor.ChatActivity

func (f fakeProgress) Activity() []supervisor.ChatActivity { return f }

// With a progress source, the heartbeat's current_task says what the running turn is doing and
// for how long, instead of only naming the chat.
func TestHeartbeatReportsActivity(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	g := chattest.NewGate()
	a := chattest.GatedAnswerer(g)
	log, _ := newTestLogger(t)
	cfg := testConfig(p, t.TempDir(), a, log)
	cfg.HeartbeatInterval = 10 * cfg.PollInterval
	cfg.Progress = fakeProgress{{ChatKey: "peer:peer-5", What: `running "npm test"`, Since: time.Now().Add(-130 * time.Second)}}
	start(t, cfg)
	defer g.Open()

	p.Enqueue(moleculetest.PeerMessage("peer-5", "slow"))
	ctx := waitCtx(t)
	must(t, a.WaitFor(ctx, func() bool { return len(a.Calls()) == 1 }))
	must(t, p.WaitFor(ctx, func() bool {
		for _, hb := range p.Heartbeats() {
			task, _ := hb["current_task"].(string)
			if hb["active_tasks"] == float64(1) && strings.HasPrefix(task, `peer:peer-5: running "npm test" (2m1`) {
				return true
			}
		}
		return false
	}))
	if n := len(p.Notifies()) + p.CountCalls(moleculetest.RouteA2A, 0); n != 0 {
		t.Errorf("%d chat messages sent while the turn ran; progress goes in the heartbeat only", n)
	}
}

func TestCurrentTask(t *testing.T) {
	t.Parallel()
	now := time.Now()
	got := currentTask(redactor{}, []supervisor.ChatActivity{
		{ChatKey: "canvas:a", What: "thinking", Since: now.Add(-5 * time.Second)},
		{ChatKey: "peer:alpha", What: `running "npm test"`, Since: now.Add(-130 * time.Second)},
	}, now)
	if want := `peer:alpha: running "npm test" (2m10s); canvas:a: thinking (5s)`; got != want {
		t.Errorf("current_task %q, want %q", got, want)
	}
	many := make([]supervisor.ChatActivity, 40)
	for i := range many {
		many[i] = supervisor.ChatActivity{ChatKey: fmt.Sprint("peer:p", i), What: "writing", Since: now}
	}
	if got := currentTask(redactor{}, many, now); len(got) > maxCurrentTask || strings.Contains(got, "\n") || !strings.HasSuffix(got, "…") {
		t.Errorf("long current_task not capped to one line of %d bytes: %q", maxCurrentTask, got)
	}
}

// Poll errors (502s, hung requests) are retried and do not lose messages.
func TestPollFailuresRecover(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{Seed: 7})
	a := chattest.NewAnswerer(nil)
	log, _ := newTestLogger(t)
	cfg := testConfig(p, t.TempDir(), a, log)
	// The hung poll gives up after this. A request the platform answered can still time out on a
	// loaded machine, and its retry then reaches the platform twice: the wait below counts
	// distinct replies, not sends.
	cfg.RequestTimeout = time.Second
	r := start(t, cfg)

	p.HangNext(moleculetest.RouteActivity, 1)
	p.SetChaos(0.3, 502, moleculetest.RouteActivity, moleculetest.RouteNotify, moleculetest.RouteA2A)
	var rows []moleculetest.Row
	want := map[string]bool{}
	for i := range 10 {
		rows = append(rows, moleculetest.PeerMessage(fmt.Sprintf("peer-%d", i%3), fmt.Sprint("m", i)))
		want[fmt.Sprint("echo: m", i)] = true
	}
	p.Enqueue(rows...)
	sent := func() map[string]bool {
		got := map[string]bool{}
		for _, s := range p.A2ASends() {
			got[s.Text] = true
		}
		return got
	}
	must(t, p.WaitFor(waitCtx(t), func() bool {
		got := sent()
		for text := range want {
			if !got[text] {
				return false
			}
		}
		return true
	}))
	for text := range sent() {
		if !want[text] {
			t.Errorf("reply %q was sent, want only the echoes of m0..m9", text)
		}
	}
	if n := len(a.Calls()); n != 10 {
		t.Fatalf("Submit called %d times for 10 rows", n)
	}
	if s := r.m.Stats(); s.PollErrors == 0 {
		t.Errorf("no poll errors counted: %+v", s)
	}
}

// OnPoll hears of every activity poll: a failed one with its error, the others with nil.
func TestOnPollReportsEveryPoll(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{Seed: 8})
	log, _ := newTestLogger(t)
	cfg := testConfig(p, t.TempDir(), chattest.NewAnswerer(nil), log)
	var mu sync.Mutex
	var polls, failed int
	cfg.OnPoll = func(d time.Duration, err error) {
		mu.Lock()
		defer mu.Unlock()
		polls++
		if err != nil {
			failed++
		}
	}
	p.FailNext(moleculetest.RouteActivity, 2, http.StatusBadGateway)
	r := start(t, cfg)
	must(t, p.WaitFor(waitCtx(t), func() bool { return p.CountCalls(moleculetest.RouteActivity, http.StatusOK) >= 3 }))
	must(t, r.stop())
	mu.Lock()
	defer mu.Unlock()
	calls := len(p.CallsTo(moleculetest.RouteActivity))
	// A poll cut off by the stop is answered by the platform but not reported.
	if failed != 2 || polls-failed < 2 || polls > calls {
		t.Errorf("OnPoll saw %d polls (%d failed); the platform answered %d polls, 2 with 502", polls, failed, calls)
	}
	if s := r.m.Stats(); s.PollErrors != 2 {
		t.Errorf("poll errors %d, want 2", s.PollErrors)
	}
}

// With ProgressInterval, a canvas chat whose turn runs gets "still working" notes saying what
// the turn does, and then its reply; a peer's chat gets no notes (a note would be a message to
// the peer agent).
func TestProgressNotes(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	g := chattest.NewGate()
	a := chattest.GatedAnswerer(g)
	log, _ := newTestLogger(t)
	cfg := testConfig(p, t.TempDir(), a, log)
	cfg.ProgressInterval = 50 * time.Millisecond
	canvas := "canvas:" + p.WorkspaceID()
	cfg.Progress = fakeProgress{
		{ChatKey: canvas, What: `running "npm test"`, Since: time.Now()},
		{ChatKey: "peer:peer-5", What: "thinking", Since: time.Now()},
	}
	start(t, cfg)

	p.Enqueue(moleculetest.PeerMessage("peer-5", "slow"), moleculetest.CanvasMessage("slow too"))
	ctx := waitCtx(t)
	must(t, a.WaitFor(ctx, func() bool { return len(a.Calls()) == 2 }))
	// Two notes: the peer's turn ran through two intervals as well.
	must(t, p.WaitFor(ctx, func() bool { return len(p.Notifies()) >= 2 }))
	for _, n := range p.Notifies() {
		if !strings.HasPrefix(n.Message, "still working (") || !strings.Contains(n.Message, `): running "npm test" (`) {
			t.Errorf("note %q", n.Message)
		}
	}
	if s := p.A2ASends(); len(s) != 0 {
		t.Errorf("peer got progress notes: %+v", s)
	}
	g.Open()
	must(t, p.WaitFor(ctx, func() bool {
		for _, n := range p.Notifies() {
			if strings.HasPrefix(n.Message, "echo: ") {
				return true
			}
		}
		return false
	}))
}

// Reply ids are version 5 UUIDs of workspace and activity: stable, and different for any other
// workspace or activity.
func TestReplyID(t *testing.T) {
	t.Parallel()
	a := platform.ReplyID("ws-1", "act-1")
	if !uuidV5.MatchString(a) || a != platform.ReplyID("ws-1", "act-1") {
		t.Fatalf("replyID = %q, want a stable v5 uuid", a)
	}
	for _, other := range []string{platform.ReplyID("ws-2", "act-1"), platform.ReplyID("ws-1", "act-2")} {
		if other == a {
			t.Fatalf("replyID collides: %q", other)
		}
	}
}
