package supervisor

import (
	"context"

	"github.com/molecule-ai/codex-warm/supervisor/progress"
)

// What a message's running turn is doing is package progress's; the supervisor's callers know
// its names as the supervisor's.

// Kinds of TurnProgress.
const (
	ProgressTurnStarted   = progress.TurnStarted
	ProgressItemStarted   = progress.ItemStarted
	ProgressItemCompleted = progress.ItemCompleted
	ProgressDelta         = progress.Delta
)

// TurnProgress is one step of a message's running turn; see WithProgress.
type TurnProgress = progress.Step

// WithProgress returns a ctx whose message (Submit, Enqueue) reports its turn's steps to fn as
// they happen (progress.With).
func WithProgress(ctx context.Context, fn func(TurnProgress)) context.Context {
	return progress.With(ctx, fn)
}

// ProgressFrom returns the observer WithProgress put on ctx, or nil (progress.From).
func ProgressFrom(ctx context.Context) func(TurnProgress) { return progress.From(ctx) }
