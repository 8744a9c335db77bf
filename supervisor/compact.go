package supervisor

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/protocol"
	"github.com/molecule-ai/codex-warm/supervisor/chatjob"
)

// The long-thread policy. A thread's history grows with every turn, and with it the child's
// private memory and codex's CPU per turn; recycling the child does not help, because a fresh
// child loads the same history. Compaction (codex's thread/compact/start) replaces the history
// with a summary the model writes and the recent user messages. It runs between turns, inside
// the chat's job, before the turn that finds it due: the chat's queue runs one job at a time, so
// no turn of the chat can race it, and the session is busy, so nothing else takes the child.

// compacter is a Child that can compact its thread (appserver.Client).
type compacter interface {
	CompactThread(ctx context.Context, threadID string) (*appserver.TurnResult, error)
}

var _ compacter = (*appserver.Client)(nil)

// Reasons a compaction ran, in logs and metrics.
const (
	CompactReasonTurns  = "turns"
	CompactReasonMemory = "memory"
)

// compactReason says why sess's thread is to be compacted before its next turn; "" when not.
// Turns count in this child since it opened the thread or last compacted it (a fresh child,
// which loads the whole history again, is caught by the memory bound). The memory bound, on
// the sampler's latest reading, fires once per child: a compaction that does not bring the
// child back under it is not repeated before every turn.
func (c *chats) compactReason(sess *session) string {
	switch {
	case sess.threadID == "":
		return ""
	case c.cfg.CompactAfterTurns > 0 && sess.turns-sess.compactedAt >= c.cfg.CompactAfterTurns:
		return CompactReasonTurns
	case c.cfg.CompactAboveBytes > 0 && !sess.compactedForMemory && sess.turns > sess.compactedAt &&
		sess.measured && sess.mem.USS > c.cfg.CompactAboveBytes:
		return CompactReasonMemory
	}
	return ""
}

// compactIfDue runs the policy on a busy session before a turn. It returns the notice for the
// chat when a due compaction was not available or failed (once per child), else "". The turn
// goes ahead either way: a child that died meanwhile fails it the usual way.
func (c *chats) compactIfDue(ctx context.Context, key string, sess *session) string {
	c.mu.Lock()
	why := c.compactReason(sess)
	if why == "" {
		c.mu.Unlock()
		return ""
	}
	// Counted as done whatever happens next: a failed compaction is tried again after as
	// many turns, not before each one.
	sess.compactedAt = sess.turns
	sess.compactedForMemory = sess.compactedForMemory || why == CompactReasonMemory
	uss := sess.mem.USS
	c.mu.Unlock()
	log := sess.log.With(zap.String("reason", why), zap.Int("turns", sess.turns), zap.Int64("uss_bytes", uss))

	cp, ok := sess.child.(compacter)
	var err error
	var status string
	if !ok {
		err = fmt.Errorf("this child cannot compact a thread")
	} else {
		cctx := ctx
		if c.cfg.TurnDeadline > 0 {
			var cancel context.CancelFunc
			cctx, cancel = context.WithTimeout(ctx, c.cfg.TurnDeadline)
			defer cancel()
		}
		var res *appserver.TurnResult
		res, err = cp.CompactThread(cctx, sess.threadID)
		if res != nil {
			status = res.Status
			// The model wrote the summary: its tokens are the chat's (counted as one turn).
			c.usage.Add(key, chatjob.CompactionUsage(res.Notifications))
		}
		if err == nil && status != protocol.TurnCompleted {
			err = fmt.Errorf("compaction ended %s", orNone(status))
		}
	}
	if err == nil {
		c.compactions.Add(1)
		log.Info("thread compacted")
		return ""
	}
	c.compactFailures.Add(1)
	log.Warn("thread compaction failed; the turn runs on the whole history", zap.Error(err))
	if ctx.Err() != nil || sess.compactNoticed {
		return ""
	}
	sess.compactNoticed = true
	return fmt.Sprintf("this conversation has grown long and could not be compacted (%v); "+
		"replies may get slower and costlier; send /new to start a fresh conversation", err)
}

func orNone(status string) string {
	if status == "" {
		return "without a status"
	}
	return status
}
