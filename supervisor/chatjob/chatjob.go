// Package chatjob is the chat commands /compact and /undo: work on a chat's codex thread that
// runs on the chat's own worker, as /new does, so that no message of the chat runs meanwhile.
// The supervisor lends the job the chat's session (Bind); this package knows what to ask codex.
package chatjob

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/protocol"
	"github.com/molecule-ai/codex-warm/projector"
)

// Errors of the chat's jobs.
var (
	// ErrNoConversation: the chat has no thread yet; nothing to compact or take back.
	ErrNoConversation = errors.New("this chat has no conversation yet")
	// ErrChatBusy: /undo while a turn of the chat runs or messages wait.
	ErrChatBusy = errors.New("a message of this chat is running or waiting")
	// ErrUndoCompacted: the exchanges to take back reach across a compaction of the thread,
	// which replaced them with its summary.
	ErrUndoCompacted = errors.New("the conversation was compacted since; what came before is only in its summary")
	// ErrClosed: the jobs are not bound to a supervisor (yet, or any more).
	ErrClosed = errors.New("no supervisor runs the chat's jobs")
)

// UndoRangeError refuses /undo N beyond the thread's start: the thread holds Exchanges.
type UndoRangeError struct {
	Asked, Exchanges int
}

func (e *UndoRangeError) Error() string {
	return fmt.Sprintf("cannot take back %d exchanges: the conversation has %d", e.Asked, e.Exchanges)
}

// MaxUndo is the most exchanges one /undo takes back.
const MaxUndo = 50

// Child is the part of a chat's codex child a job uses; it may also compact a thread
// (CompactThread) and list a thread's turns (ListTurns), as appserver.Client does.
type Child interface {
	RevertThread(ctx context.Context, threadID, beforeTurnID string) error
}

type compacter interface {
	CompactThread(ctx context.Context, threadID string) (*appserver.TurnResult, error)
}

type turnLister interface {
	ListTurns(ctx context.Context, threadID string, limit int) ([]appserver.HistoryTurn, error)
}

// Session is a chat's codex thread, lent to a job on the chat's worker.
type Session struct {
	Child    Child
	ThreadID string
	PID      int
	Log      *zap.Logger
	// AddUsage counts the model tokens the job spent as the chat's.
	AddUsage func(projector.Usage)
	// Deadline bounds a job that calls the model (a compaction); 0: none.
	Deadline time.Duration
}

// Runner runs fn on chatKey's worker with the chat's session (its thread resumed in a child
// when it has none live). With wait, fn runs after the chat's running and queued messages, and
// waited says there were some; without, it is refused (busy) while there are. A chat without a
// thread gets an error wrapping ErrNoConversation.
type Runner func(ctx context.Context, chatKey string, wait bool, fn func(s Session) error) (waited bool, err error)

// Jobs runs /compact and /undo. Its zero value is unbound: the supervisor that runs the chats
// binds it (Bind).
type Jobs struct {
	run atomic.Pointer[Runner]
}

// Bind makes run the runner of the jobs.
func (j *Jobs) Bind(run Runner) { j.run.Store(&run) }

func (j *Jobs) runner() (Runner, error) {
	r := j.run.Load()
	if r == nil {
		return nil, ErrClosed
	}
	return *r, nil
}

// CompactResult says what Compact did.
type CompactResult struct {
	// Waited is set when the compaction waited for the chat's running or queued messages.
	Waited bool
	// Before is the tokens the summary's model call read (the history as it was), After the
	// compacted context's size; 0 when codex did not report it.
	Before, After int64
}

// Compact compacts chatKey's thread (codex's thread/compact/start) on the chat's worker, after
// the chat's running and queued messages, and returns once it is done.
func (j *Jobs) Compact(ctx context.Context, chatKey string) (CompactResult, error) {
	run, err := j.runner()
	if err != nil {
		return CompactResult{}, err
	}
	var res CompactResult
	res.Waited, err = run(ctx, chatKey, true, func(s Session) error {
		var err error
		res.Before, res.After, err = compact(ctx, chatKey, s)
		return err
	})
	return res, err
}

func compact(ctx context.Context, key string, s Session) (before, after int64, err error) {
	cp, ok := s.Child.(compacter)
	if !ok {
		return 0, 0, fmt.Errorf("chat %s: codex pid %d cannot compact a thread", key, s.PID)
	}
	if s.Deadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.Deadline)
		defer cancel()
	}
	res, err := cp.CompactThread(ctx, s.ThreadID)
	if res != nil {
		if s.AddUsage != nil {
			s.AddUsage(CompactionUsage(res.Notifications))
		}
		before, after = compactionSizes(res.Notifications)
	}
	if err == nil && (res == nil || res.Status != protocol.TurnCompleted) {
		status := "without a status"
		if res != nil && res.Status != "" {
			status = res.Status
		}
		err = fmt.Errorf("compaction ended %s", status)
	}
	if err != nil {
		return before, after, fmt.Errorf("chat %s: thread %s: compact: %w", key, s.ThreadID, err)
	}
	s.Log.Info("thread compacted from the chat", zap.Int64("tokens_before", before), zap.Int64("tokens_after", after))
	return before, after, nil
}

// CompactionUsage is the tokens a compaction spent. codex 0.171.0 reports the summary's model
// call (thread/tokenUsage/updated, `last` of that call), then a second update whose `last` is
// the compacted context's size with every component zero and the thread's total unchanged: not
// a model call, so it is left out of the sum projector.Project would make.
func CompactionUsage(ns []protocol.Notification) projector.Usage {
	calls := make([]protocol.Notification, 0, len(ns))
	for _, n := range ns {
		if l, ok := lastUsage(n); ok && l.InputTokens == 0 && l.OutputTokens == 0 {
			continue
		}
		calls = append(calls, n)
	}
	return projector.Project(calls).Usage
}

// lastUsage is the `last` of a thread/tokenUsage/updated.
func lastUsage(n protocol.Notification) (protocol.TokenUsageBreakdown, bool) {
	if n.Method != protocol.NotifyTokenUsageUpdated {
		return protocol.TokenUsageBreakdown{}, false
	}
	var tu protocol.TokenUsageNotification
	if json.Unmarshal(n.Params, &tu) != nil {
		return protocol.TokenUsageBreakdown{}, false
	}
	return tu.TokenUsage.Last, true
}

// compactionSizes reads a compaction's token sizes (see CompactionUsage): the summary's model
// call read the history (before); the update after it, every component zero, is the compacted
// context's size (after).
func compactionSizes(ns []protocol.Notification) (before, after int64) {
	for _, n := range ns {
		l, ok := lastUsage(n)
		switch {
		case !ok:
		case l.InputTokens == 0 && l.OutputTokens == 0:
			after = l.TotalTokens
		case before == 0:
			before = l.InputTokens
		}
	}
	return before, after
}
