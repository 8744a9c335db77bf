package molecule

import (
	"context"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/bridge/chat"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// A /new that arrives while messages of its chat sent before it are still in this inbox: its
// Reset waits on the chat's queue behind them (dispatcher.enqueueNew), and its answer goes out at
// once.

// queuedResetControls are the Controls a /new runs with when its Reset waits on the chat's
// queue: the answer says the chat starts over once the earlier messages are answered.
type queuedResetControls struct{ chat.Controls }

// Reset does not reset: the reset job on the chat's queue will.
func (queuedResetControls) Reset(context.Context, string) (supervisor.ResetResult, error) {
	return supervisor.ResetResult{Deferred: true}, nil
}

// queuedReset runs a /new's Reset on the chat's queue, after the messages received before it
// reached the supervisor (which finishes them on the old thread first).
func (a *answerer) queuedReset(ctx context.Context, log *zap.Logger, chatKey string) {
	res, err := a.cfg.Controls.Reset(ctx, chatKey)
	if err != nil {
		log.Error("chat could not start over; its next message resumes the old thread", zap.Error(err))
		return
	}
	log.Info("chat starts over after its earlier messages", zap.Bool("after_running_turn", res.Deferred),
		zap.String("old_thread_id", res.OldThreadID))
}

// ObserveCommand counts the /new as the inbox's own Controls count commands (chat.CommandObserver).
func (q queuedResetControls) ObserveCommand(name string) {
	if o, ok := q.Controls.(chat.CommandObserver); ok {
		o.ObserveCommand(name)
	}
}
