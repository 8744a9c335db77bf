package molecule

// The turn's view: what a running turn shows the chat beside its answer. Progress notes
// (progress.go), tool chips (chips.go) and approval prompts (approvals.go), each relayed by a
// goroutine of the message's own that ends once the turn's result is in. None of it is the reply:
// each goes out once (a prompt until the platform takes it) through the replies' door (sender).

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/supervisor"
)

// turnView owns the tool chips' pacing; mu guards chipLast.
type turnView struct {
	deps
	out sender

	mu       sync.Mutex
	chipLast map[string]time.Time // chat key → its last tool chip (chips.go)
}

func newTurnView(d deps, out sender) *turnView {
	return &turnView{deps: d, out: out, chipLast: make(map[string]time.Time)}
}

// open is the context msg's turn runs on: it reports the turn's completed tool calls to msg's
// chip queue, which it returns too. A chat that shows no chips (they are off, or msg is not a
// canvas user's) gets ctx itself and no queue.
func (v *turnView) open(ctx context.Context, msg message) (context.Context, *chips) {
	if !v.cfg.ToolChips || msg.Route.Kind != routeNotify {
		return ctx, nil
	}
	q := &chips{ch: make(chan supervisor.TurnProgress, chipQueue)}
	return supervisor.WithProgress(ctx, func(p supervisor.TurnProgress) {
		if p.Kind != supervisor.ProgressItemCompleted || p.Tool == "" {
			return
		}
		select {
		case q.ch <- p:
		default:
			v.c.chipsDropped.Add(1) // a burst beyond the queue: coalesced anyway
		}
	}), q
}

// show starts relaying what msg's turn, begun at begun, shows the chat: its approval prompts
// (with Controls), its progress notes (when on, for a canvas message) and its chips (q, from
// open). stop ends the relays and returns once they are gone: call it when the turn's result is
// in.
func (v *turnView) show(ctx context.Context, log *zap.Logger, msg message, begun time.Time, q *chips) (stop func()) {
	var relay sync.WaitGroup
	relayCtx, cancel := context.WithCancel(ctx)
	if v.cfg.Controls != nil {
		relay.Go(func() { v.relayApprovals(relayCtx, log, msg) })
	}
	if v.cfg.ProgressInterval > 0 && v.cfg.Progress != nil && msg.Route.Kind == routeNotify {
		relay.Go(func() { v.relayProgress(relayCtx, log, msg, begun) })
	}
	if q != nil {
		relay.Go(func() { v.relayChips(relayCtx, log, msg.ChatKey, q) })
	}
	return func() {
		cancel()
		relay.Wait()
	}
}
