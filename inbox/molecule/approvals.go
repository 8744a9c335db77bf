package molecule

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/inbox/chat"
)

// relayApprovals sends the chat each approval its running message's turn asks for, until ctx
// ends (Submit returned). A prompt goes out like a reply, retried until the platform takes it,
// with a message id made from the activity, the turn and the request id: a retry, or the same
// prompt from another attempt, is the same message to the platform and the peer. It is not kept
// in the state file: an approval does not outlive its turn, and after a restart the message is
// answered again, which asks again.
func (m *Inbox) relayApprovals(ctx context.Context, log *zap.Logger, msg message) {
	var after uint64
	for {
		a, err := m.cfg.Controls.WaitApproval(ctx, msg.ChatKey, after)
		if err != nil {
			return
		}
		after = a.Seq
		text := chat.Truncate(m.client.red.String(chat.ApprovalPrompt(a)), m.cfg.MaxReplyBytes, "approval prompt")
		p := pendingReply{
			ActivityID: msg.ActivityID,
			ChatKey:    msg.ChatKey,
			Route:      msg.Route,
			Text:       text,
			MessageID:  replyID(m.cfg.WorkspaceID, msg.ActivityID+"/approval/"+a.TurnID+"/"+a.RequestID),
		}
		plog := log.With(zap.String("request_id", a.RequestID), zap.String("turn_id", a.TurnID))
		err = retryForever(ctx, m.cfg.RetryInitial, m.cfg.RetryMax, func() error {
			err := m.sendAs(ctx, plog, p, p.MessageID)
			if err != nil && permanentDeliveryError(err) {
				return backoff.Permanent(err)
			}
			return err
		}, func(err error, wait time.Duration) {
			m.c.deliveryRetries.Add(1)
			plog.Warn("approval prompt delivery failed; retrying", zap.Error(err), zap.Duration("retry_in", wait))
		})
		if err != nil {
			if ctx.Err() == nil {
				plog.Error("platform refused the approval prompt; it is declined when it times out", zap.Error(err))
			}
			continue
		}
		plog.Info("approval prompt delivered")
	}
}
