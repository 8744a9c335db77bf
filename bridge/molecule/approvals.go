package molecule

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/bridge/chat"
	"github.com/molecule-ai/codex-warm/bridge/molecule/ledger"
	"github.com/molecule-ai/codex-warm/bridge/molecule/platform"
)

// party is who is shown an approval prompt and answers it: a chat key and where its messages go.
type party struct {
	ChatKey string
	Route   ledger.Route
}

// approvalParty is who answers every approval on Molecule: the workspace's canvas user, for a
// canvas message, a peer's message and a delegation result alike. The canvas user is the person
// who owns this workspace and the machine codex runs commands on. A peer is an agent: a prompt
// sent to it would start a turn there, its model's /approve would be no person's decision, and
// anyone who can message this workspace could run commands with it. A delegation result is
// answered to the canvas, so its prompt goes there as well. The supervisor takes an answer only
// from the chat the prompt went to (supervisor.Input.AskApprovalsOf), so the party shown a prompt
// is the party whose answer counts.
func (v *turnView) approvalParty() party {
	return party{
		ChatKey: "canvas:" + v.cfg.WorkspaceID,
		Route:   ledger.Route{Kind: routeNotify, Workspace: v.cfg.WorkspaceID},
	}
}

// relayApprovals sends the party asked (approvalParty) each approval msg's turn asks for, until ctx
// ends (Submit returned). A prompt goes out like a reply, retried until the platform takes it,
// with a message id made from the activity, the turn and the request id: a retry, or the same
// prompt from another attempt, is the same message to the platform and the peer. It is not kept
// in the state file: an approval does not outlive its turn, and after a restart the message is
// answered again, which asks again.
func (v *turnView) relayApprovals(ctx context.Context, log *zap.Logger, msg message) {
	var after uint64
	for {
		a, err := v.cfg.Controls.WaitApproval(ctx, msg.ChatKey, after)
		if err != nil {
			return
		}
		after = a.Seq
		text := chat.Truncate(v.red.String(chat.ApprovalPrompt(a)), v.cfg.MaxReplyBytes, "approval prompt")
		to := v.approvalParty()
		p := ledger.Reply{
			ActivityID: msg.ActivityID,
			ChatKey:    to.ChatKey,
			Route:      to.Route,
			Text:       text,
			MessageID:  platform.ReplyID(v.cfg.WorkspaceID, msg.ActivityID+"/approval/"+a.TurnID+"/"+a.RequestID),
		}
		plog := log.With(zap.String("request_id", a.RequestID), zap.String("turn_id", a.TurnID))
		err = platform.RetryForever(ctx, v.cfg.RetryInitial, v.cfg.RetryMax, func() error {
			err := v.out.sendAs(ctx, plog, &p, p.MessageID)
			if err != nil && platform.Permanent(err) {
				return backoff.Permanent(err)
			}
			return err
		}, func(err error, wait time.Duration) {
			v.c.deliveryRetries.Add(1)
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
