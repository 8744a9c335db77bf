package chat

import (
	"context"

	"github.com/molecule-ai/codex-warm/supervisor"
)

// Answerer runs one turn for a chat key and returns its outcome. *supervisor.Supervisor
// implements it; tests use fakes (chattest.Answerer). SubmitInput must serialize calls of one
// chat key (FIFO) and may run calls of different chat keys in parallel.
type Answerer interface {
	SubmitInput(ctx context.Context, chatKey string, in supervisor.Input) (supervisor.Reply, error)
}
