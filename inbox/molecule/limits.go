package molecule

// Parking a message while the account's usage limit lasts: its row stays unacknowledged, the
// chat is told once when it will be answered, and it runs after the reset in its turn.

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/inbox/chat"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// DefaultParkLimit is Config.ParkLimit's default.
const DefaultParkLimit = 24 * time.Hour

// Parker parks work until the account's usage limit resets (*supervisor.Supervisor).
type Parker interface {
	// AwaitUsable blocks until the limit is past and it is the caller's turn (oldest since
	// first); it returns ctx's cause when ctx ends first.
	AwaitUsable(ctx context.Context, chatKey string, since time.Time) error
}

// untilServed runs try (through untilReachable) and, while its result is the account's usage
// limit, parks the message until the reset and runs it again, for as long as the reset is
// within ParkLimit of the message's arrival. It returns the last result: an answer, a failure,
// the limit once parking would pass ParkLimit, or the limit when ctx ended the wait.
func (m *Inbox) untilServed(ctx, drainCtx context.Context, log *zap.Logger, msg message, try func() (supervisor.Reply, error)) (supervisor.Reply, error) {
	since := msg.arrived()
	told := false
	for {
		reply, err := m.untilReachable(ctx, drainCtx, log, msg, try)
		var ul *supervisor.UsageLimitError
		if m.cfg.Limits == nil || chat.Classify(reply, err) != chat.OutcomeUsageLimit || !errors.As(err, &ul) {
			return reply, err
		}
		if ul.ResetsAt.Sub(since) > m.cfg.ParkLimit {
			log.Info("the account's usage limit resets past the park limit; the message is answered with it",
				zap.Time("resets_at", ul.ResetsAt), zap.Duration("park_limit", m.cfg.ParkLimit))
			m.c.parkedTooLong.Add(1)
			return reply, err
		}
		if !told {
			told = true
			m.c.parked.Add(1)
			if m.ledger.markParked(msg.ActivityID) {
				// Durable before it is sent: a restart must not tell the chat again.
				m.syncState(log, "recording the usage-limit notice")
				m.tellParked(drainCtx, log, msg, ul)
			}
		}
		log.Info("the account's usage limit is reached; the message stays unacknowledged and runs after the reset",
			zap.Time("resets_at", ul.ResetsAt))
		if werr := m.cfg.Limits.AwaitUsable(ctx, msg.ChatKey, since); werr != nil {
			return reply, err // ctx ended: settle leaves the row for the next run
		}
	}
}

// arrived is when the message came: the row's created_at, else (or when it claims a time after
// this run read the row) when this run read it. Parked messages resume in this order, and
// ParkLimit counts from it.
func (msg message) arrived() time.Time {
	if t, err := time.Parse(time.RFC3339Nano, msg.CreatedAt); err == nil && !t.After(msg.ReceivedAt) {
		return t
	}
	return msg.ReceivedAt
}

// tellParked tells msg's chat, once, that the account's usage limit holds its message until the
// reset. It is tried once, like a progress note: the answer itself follows.
func (m *Inbox) tellParked(ctx context.Context, log *zap.Logger, msg message, ul *supervisor.UsageLimitError) {
	text := chat.UsageLimitParkedText(ul, time.Now())
	p := pendingReply{ActivityID: msg.ActivityID, ChatKey: msg.ChatKey, Route: msg.Route,
		Text: m.client.red.String(text), MessageID: replyID(m.cfg.WorkspaceID, msg.ActivityID+"/usage-limit")}
	if err := m.sendAs(ctx, log, &p, p.MessageID); err != nil && ctx.Err() == nil {
		log.Info("usage-limit notice not delivered", zap.Error(err))
	}
}
