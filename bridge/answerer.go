package bridge

import (
	"context"

	"github.com/molecule-ai/codex-warm/supervisor"
)

// Answerer runs one turn for a chat key and returns its outcome. *supervisor.Supervisor
// implements it; tests use fakes. SubmitInput must serialize calls of one chat key (FIFO) and may
// run calls of different chat keys in parallel.
type Answerer interface {
	SubmitInput(ctx context.Context, chatKey string, in supervisor.Input) (supervisor.Reply, error)
}

// Enqueuer hands a message over without waiting for its reply (*supervisor.Supervisor): the
// ticket's Wait returns it. Messages of a chat enqueued one after another keep their order.
type Enqueuer interface {
	EnqueueInput(ctx context.Context, chatKey string, in supervisor.Input) (*supervisor.Ticket, error)
}
