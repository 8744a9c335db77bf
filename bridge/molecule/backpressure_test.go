package molecule

import (
	"context"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// With the unacked window full, polling pauses: a row enqueued meanwhile is not even received
// until the oldest message is finished.
func TestUnackedWindowPausesPolling(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	g := chattest.NewGate()
	a := chattest.NewAnswerer(func(ctx context.Context, key, text string) (supervisor.Reply, error) {
		if text == "hold" {
			if err := g.Wait(ctx); err != nil {
				return supervisor.Reply{}, err
			}
		}
		return chattest.EchoReply(key, text), nil
	})
	paused := make(chan struct{}, 16)
	log, _ := newTestLogger(t)
	log = log.WithOptions(zap.Hooks(func(e zapcore.Entry) error {
		if strings.Contains(e.Message, "polling paused") {
			paused <- struct{}{}
		}
		return nil
	}))
	cfg := testConfig(p, t.TempDir(), a, log)
	cfg.MaxUnacked = 1
	r := start(t, cfg)
	defer g.Open()

	p.Enqueue(moleculetest.PeerMessage("peer-1", "hold"))
	ctx := waitCtx(t)
	select {
	case <-paused:
	case <-ctx.Done():
		t.Fatal("polling never paused with a full window")
	}
	p.Enqueue(moleculetest.PeerMessage("peer-2", "later"))
	if s := r.m.Stats(); s.Received != 1 || s.Unacked != 1 {
		t.Fatalf("stats while paused = %+v", s)
	}
	g.Open()
	must(t, p.WaitFor(ctx, func() bool { return len(p.A2ASends()) == 2 }))
	if _, most, _, _ := a.Snapshot(); most != 1 {
		t.Fatalf("%d turns ran at once with a window of 1", most)
	}
}

// A page larger than MaxPollBytes is read in pieces: complete rows are used, the rest comes with
// the next poll.
func TestOversizedPageReadInPieces(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	a := chattest.NewAnswerer(nil)
	log, _ := newTestLogger(t)
	cfg := testConfig(p, t.TempDir(), a, log)
	cfg.MaxPollBytes = 1500
	r := start(t, cfg)

	// Start with a cursor so pages come oldest first.
	p.Enqueue(moleculetest.CanvasMessage("first"))
	ctx := waitCtx(t)
	must(t, p.WaitFor(ctx, func() bool { return len(p.Notifies()) == 1 }))
	var rows []moleculetest.Row
	for i := range 6 {
		rows = append(rows, moleculetest.CanvasMessage(strings.Repeat(string(rune('a'+i)), 400)))
	}
	p.Enqueue(rows...)
	must(t, p.WaitFor(ctx, func() bool { return len(p.Notifies()) == 7 }))
	for i, c := range a.Calls()[1:] {
		if c.Text != strings.Repeat(string(rune('a'+i)), 400) {
			t.Fatalf("call %d out of order: %.10q", i, c.Text)
		}
	}
	if s := r.m.Stats(); s.Poison != 0 || s.PollErrors != 0 {
		t.Fatalf("stats = %+v", s)
	}
}
