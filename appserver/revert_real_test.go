package appserver_test

import (
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/internal/mockmodel"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// A turn that fails at once (a usage limit) is dropped with thread/revert as soon as its
// turn/completed arrives, which is what the supervisor does with a message that waits for the
// reset, half the rounds on a new thread (whose first turn also creates its rollout). codex may
// still hold the thread's writer for that turn for a moment and refuse the revert ("already has
// an active writer": seen once in a CI run; not in 480 rounds of this test beside two busy
// loops); RevertThread waits for it (TestFakeRevertWaitsForTheWriter).
func TestRealRevertRightAfterFailedTurn(t *testing.T) {
	reset := time.Now().Add(time.Hour).Truncate(time.Second)
	e := newRealEnv(t, mockmodel.Config{Script: func(req mockmodel.Request) mockmodel.Reply {
		return mockmodel.Reply{UsageLimit: &mockmodel.UsageLimit{ResetsAt: reset}}
	}})
	c := e.start(t, nil)
	ctx := ctxTimeout(t, 3*time.Minute)
	const rounds = 40
	var thread string
	for i := range rounds {
		if i%2 == 0 {
			var err error
			if thread, err = c.StartThread(ctx, e.threadOpts("")); err != nil {
				t.Fatal(err)
			}
		}
		res := mustTurn(t, c, ctx, thread, "limit")
		if res.Status != protocol.TurnFailed {
			t.Fatalf("round %d: status %q, want failed", i, res.Status)
		}
		if err := c.RevertThread(ctx, thread, res.TurnID); err != nil {
			t.Fatalf("round %d: revert right after the failed turn: %v", i, err)
		}
	}
	if n := len(e.mock.Requests()); n != rounds {
		t.Errorf("%d model requests, want %d", n, rounds)
	}
	last := e.mock.Requests()[rounds-1]
	if len(last.UserTexts) != 1 {
		t.Errorf("the last request's user texts %q: the reverted turns are still in the thread", last.UserTexts)
	}
}
