package appserver_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// TestRealInterruptRightAfterTurnStart: a turn interrupted the moment codex has answered
// turn/start (before codex registered it as its active turn, which it does a moment later) is
// interrupted all the same, every time, and the child stays usable. The model never answers,
// so only the interrupt can end the turn.
func TestRealInterruptRightAfterTurnStart(t *testing.T) {
	noLeaks(t)
	e := newRealEnv(t, mockmodel.Config{Script: func(mockmodel.Request) mockmodel.Reply {
		return mockmodel.Reply{Hang: true}
	}})
	c := e.start(t, nil)
	ctx := ctxTimeout(t, 5*time.Minute)
	thread, err := c.StartThread(ctx, e.threadOpts("never"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		tctx, cancel := context.WithCancel(ctx)
		res, err := c.RunTurn(tctx, thread, text("stop me"), appserver.TurnOptions{
			OnStarted: func(string) { cancel() },
			// Long enough that a lost interrupt shows as ErrWedged, not as a slow machine.
			InterruptGrace: 20 * time.Second,
		})
		cancel()
		if errors.Is(err, appserver.ErrWedged) {
			t.Fatalf("turn %d: interrupt lost, the turn outlived the grace: %v", i, err)
		}
		if !errors.Is(err, context.Canceled) || res == nil || res.Status != protocol.TurnInterrupted {
			t.Fatalf("turn %d: status %v, err %v; want interrupted and context.Canceled", i, statusOf(res), err)
		}
	}
}

func statusOf(res *appserver.TurnResult) string {
	if res == nil {
		return "<no result>"
	}
	return res.Status
}
