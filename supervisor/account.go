package supervisor

import (
	"context"
	"time"

	"github.com/molecule-ai/codex-warm/supervisor/account"
)

// The account's state is package account's: whether the model can be reached, the usage limits
// and the work parked until their reset, each chat's token totals. The supervisor holds one of
// each and answers for them here.

// Names of package account that callers know as the supervisor's.
type (
	ModelStatus     = account.ModelStatus
	LimitStatus     = account.LimitStatus
	LimitWindow     = account.LimitWindow
	LimitCredits    = account.LimitCredits
	UsageLimitError = account.UsageLimitError
	ChatUsage       = account.ChatUsage
)

// Files and defaults of package account.
const (
	LimitsFile           = account.LimitsFile
	UsageFile            = account.UsageFile
	UsageJournalFile     = account.UsageJournalFile
	DefaultResumeSpacing = account.DefaultResumeSpacing
)

// Model is whether the model could be reached, as the turns found it; cheap (no /proc reads),
// for readiness probes.
func (s *Supervisor) Model() ModelStatus { return s.model.Status() }

// Limits is the account's usage limits as codex last reported them; cheap (no /proc reads).
func (s *Supervisor) Limits() LimitStatus { return s.limits.Status() }

// AwaitUsable blocks until the account's usage limit is past and it is the caller's turn:
// parked callers go oldest first (by since, the message's arrival), one every
// Config.ResumeSpacing and each once the one before it reached its turn on chatKey's queue, so
// the reset is not met by all of them at once. It returns at once when
// nothing is parked. It returns ctx's cause when ctx ends first.
func (s *Supervisor) AwaitUsable(ctx context.Context, chatKey string, since time.Time) error {
	return s.limits.Await(ctx, chatKey, since)
}

// OldestIdle is how long ago the chat idle the longest had its last turn that used tokens
// (from the token totals, which remember every chat); ok is false when none has one.
func (s *Supervisor) OldestIdle() (idle time.Duration, ok bool) {
	at, ok := s.usage.OldestTurn()
	if !ok {
		return 0, false
	}
	return max(time.Since(at), 0), true
}

// Usage is each chat's token usage, summed over its turns since the state dir began.
func (s *Supervisor) Usage() map[string]ChatUsage { return s.usage.All() }

// ChatUsage is chatKey's token usage, summed over its turns.
func (s *Supervisor) ChatUsage(chatKey string) ChatUsage { return s.usage.Chat(chatKey) }
