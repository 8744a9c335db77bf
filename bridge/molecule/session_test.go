package molecule

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// resetLog is a Resetter that records, for each Reset, how many turns the answerer had been
// asked for before it: which message the reset came before.
type resetLog struct {
	mu     sync.Mutex
	a      *chattest.Answerer
	resets []string
}

func (r *resetLog) Reset(_ context.Context, key string) (supervisor.ResetResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.resets = append(r.resets, fmt.Sprintf("%s after %d turns", key, len(r.a.Calls())))
	return supervisor.ResetResult{}, nil
}

func (r *resetLog) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.resets)
}

// One New session pressed on the canvas starts exactly one new thread, before the first message
// sent after it, from whichever device; a second device's own sess- id joins it, and the
// platform's canvas-<ws> turns never start one. A press while the daemon is down is seen after
// its restart, and a message seen again after a restart does not start a second thread.
func TestCanvasNewSessionResetsOnce(t *testing.T) {
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	log, _ := newTestLogger(t)
	dir := t.TempDir()
	a := chattest.NewAnswerer(nil)
	resets := &resetLog{a: a}
	cfg := testConfig(p, dir, a, log)
	cfg.Resetter = resets
	r := start(t, cfg)
	ctx := waitCtx(t)
	key := "canvas:" + p.WorkspaceID()
	answered := func(n int) {
		t.Helper()
		must(t, p.WaitFor(ctx, func() bool { return len(p.Notifies()) == n }))
	}

	p.Enqueue(p.CanvasFrom("A", "a1"), p.CanvasFrom("B", "b1"))
	answered(2)
	if got := resets.got(); len(got) != 0 {
		t.Fatalf("resets before any New session: %q", got)
	}

	p.NewChatSession()
	p.Enqueue(p.CanvasFrom("A", "a2"), p.CanvasFrom("B", "b2"), p.PlatformTurn("restart wake"), p.CanvasFrom("A", "a3"))
	answered(6)
	if got, want := resets.got(), []string{key + " after 2 turns"}; !slices.Equal(got, want) {
		t.Fatalf("resets after one New session and messages from two devices = %q, want %q", got, want)
	}
	if a2, b2 := p.DeviceContextID("A"), p.DeviceContextID("B"); a2 == b2 || a2 == p.DefaultContextID() {
		t.Fatalf("devices send %q and %q, want two sess- ids of their own", a2, b2)
	}

	// The second press comes from device B's side: its message is the first after it.
	p.NewChatSession()
	p.Enqueue(p.CanvasFrom("B", "b3"), p.CanvasFrom("A", "a4"))
	answered(8)
	if got := resets.got(); len(got) != 2 || got[1] != key+" after 6 turns" {
		t.Fatalf("resets after the second New session = %q, want a second one before b3", got)
	}

	// Pressed while the daemon is down: the restarted daemon still starts over, once.
	must(t, r.stop())
	p.NewChatSession()
	p.Enqueue(p.CanvasFrom("A", "a5"), p.CanvasFrom("B", "b4"))
	a2nd := chattest.NewAnswerer(nil)
	resets2 := &resetLog{a: a2nd}
	cfg2 := testConfig(p, dir, a2nd, log)
	cfg2.Resetter = resets2
	start(t, cfg2)
	answered(10)
	if got, want := resets2.got(), []string{key + " after 0 turns"}; !slices.Equal(got, want) {
		t.Fatalf("resets of the restarted daemon = %q, want %q (the press made while it was down)", got, want)
	}
	if n := p.CountCalls(moleculetest.RouteChatHistory, 200); n == 0 {
		t.Errorf("chat-history was never read")
	}
}

// A platform that cannot say (no chat-history route) keeps the chat on its thread, and says so.
func TestCanvasNewSessionUnreadableHistoryContinues(t *testing.T) {
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	log, logs := newTestLogger(t)
	a := chattest.NewAnswerer(nil)
	resets := &resetLog{a: a}
	cfg := testConfig(p, t.TempDir(), a, log)
	cfg.Resetter = resets
	start(t, cfg)
	ctx := waitCtx(t)
	p.Enqueue(p.CanvasFrom("A", "a1"))
	must(t, p.WaitFor(ctx, func() bool { return len(p.Notifies()) == 1 }))
	p.NewChatSession()
	p.FailNext(moleculetest.RouteChatHistory, 1, 404)
	p.Enqueue(p.CanvasFrom("A", "a2"))
	must(t, p.WaitFor(ctx, func() bool { return len(p.Notifies()) == 2 }))
	if got := resets.got(); len(got) != 0 {
		t.Errorf("resets with chat-history unreadable = %q, want none", got)
	}
	if n := logs.FilterMessageSnippet("cannot tell whether the canvas started a new session").Len(); n != 1 {
		t.Errorf("%d warnings about the unreadable chat-history, want 1", n)
	}
}
