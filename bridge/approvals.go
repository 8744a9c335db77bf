package bridge

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/protocol"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// Approvals asked in the chat (--approval ask): the turn's approval request is shown to the chat
// and the chat's /approve, /approve session or /deny answers it, beside the chat's queue.

// maxPromptCommandBytes bounds the command (and each diff line count) shown in a prompt.
const maxPromptCommandBytes = 2000

// maxPromptFiles bounds the files listed in a file change prompt.
const maxPromptFiles = 20

// approvalPrompt is the message that shows the chat what codex asks and how to answer.
func approvalPrompt(a supervisor.Approval) string {
	var b strings.Builder
	switch a.Kind {
	case appserver.ApprovalFileChange:
		b.WriteString("codex asks to change files")
		if a.Reason != "" {
			fmt.Fprintf(&b, " (%s)", capText(a.Reason, maxPromptCommandBytes))
		}
		b.WriteString(":\n")
		for i, c := range a.Changes {
			if i == maxPromptFiles {
				fmt.Fprintf(&b, "  ... and %d more\n", len(a.Changes)-i)
				break
			}
			fmt.Fprintf(&b, "  %s %s (%d diff lines)\n", changeKind(c.Kind), capText(c.Path, 300), strings.Count(c.Diff, "\n"))
		}
		if len(a.Changes) == 0 {
			b.WriteString("  (codex did not say which)\n")
		}
		b.WriteString("Answer /approve to apply the changes, /approve session to allow changes for the rest of this conversation, or /deny.")
	default:
		b.WriteString("codex asks to run a command")
		if a.Reason != "" {
			fmt.Fprintf(&b, " (%s)", capText(a.Reason, maxPromptCommandBytes))
		}
		fmt.Fprintf(&b, ":\n  %s\n", capText(a.Command, maxPromptCommandBytes))
		if a.Cwd != "" {
			fmt.Fprintf(&b, "in %s\n", capText(a.Cwd, 300))
		}
		b.WriteString("Answer /approve to run it, /approve session to allow it for the rest of this conversation, or /deny.")
	}
	if d := time.Until(a.Expires); d > 0 {
		fmt.Fprintf(&b, " Without an answer it is declined in %s.", d.Round(time.Second))
	}
	return b.String()
}

// changeKind reads a fileChange kind: {"type":"add"} or a plain string.
func changeKind(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil && s != "" {
		return s
	}
	var k struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(raw, &k) == nil && k.Type != "" {
		return k.Type
	}
	return "change"
}

// answerApproval carries out /approve, /approve session and /deny.
func answerApproval(c Controls, chatKey string, cmd command) string {
	decision, verb := protocol.DecisionDecline, "denied"
	if cmd.name == cmdApprove {
		decision, verb = protocol.DecisionAccept, "approved"
		switch strings.ToLower(cmd.args) {
		case "":
		case "session":
			decision, verb = protocol.DecisionAcceptForSession, "approved for the rest of this conversation"
		default:
			return "use /approve, /approve session or /deny"
		}
	}
	a, ok := c.Answer(chatKey, decision)
	if !ok {
		return "nothing is waiting for your approval"
	}
	what := a.Command
	if a.Kind == appserver.ApprovalFileChange {
		what = fmt.Sprintf("changes to %d files", len(a.Changes))
	}
	return verb + ": " + capText(what, maxPromptCommandBytes)
}

// relayApprovals sends the chat each approval its running message's turn asks for, until ctx
// ends (Submit returned). A prompt goes out like a reply, retried until the platform takes it,
// with a message id made from the activity, the turn and the request id: a retry, or the same
// prompt from another attempt, is the same message to the platform and the peer. It is not kept
// in the state file: an approval does not outlive its turn, and after a restart the message is
// answered again, which asks again.
func (m *Molecule) relayApprovals(ctx context.Context, log *zap.Logger, msg message) {
	var after uint64
	for {
		a, err := m.cfg.Controls.WaitApproval(ctx, msg.ChatKey, after)
		if err != nil {
			return
		}
		after = a.Seq
		text := truncate(m.client.red.String(approvalPrompt(a)), m.cfg.MaxReplyBytes, "approval prompt")
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

// LocalApproval is the answer of GET /v1/chats/{chatKey}/approval: what the chat's running turn
// waits for. Text is the prompt a chat would see.
type LocalApproval struct {
	ChatKey   string                      `json:"chat_key"`
	Kind      string                      `json:"kind"`
	Command   string                      `json:"command,omitempty"`
	Cwd       string                      `json:"cwd,omitempty"`
	Reason    string                      `json:"reason,omitempty"`
	Changes   []protocol.FileUpdateChange `json:"changes,omitempty"`
	RequestID string                      `json:"request_id"`
	TurnID    string                      `json:"turn_id"`
	Asked     time.Time                   `json:"asked"`
	Expires   time.Time                   `json:"expires"`
	Text      string                      `json:"text"`
}

// getApproval answers GET /v1/chats/{chatKey}/approval: the POST of a message whose turn waits
// for an approval cannot answer yet, so the caller reads the prompt here (or with /status) and
// answers with /approve or /deny in another POST.
func (h *LocalInbox) getApproval(w http.ResponseWriter, r *http.Request) {
	key, ok := chatKeyOf(w, r)
	if !ok {
		return
	}
	if h.cfg.Controls == nil {
		writeJSON(w, http.StatusNotFound, LocalError{Error: "chat commands are off: nothing can be approved in the chat"})
		return
	}
	a, ok := h.cfg.Controls.PendingApproval(key)
	if !ok {
		writeJSON(w, http.StatusNotFound, LocalError{Error: "nothing is waiting for approval in this chat"})
		return
	}
	writeJSON(w, http.StatusOK, LocalApproval{
		ChatKey: key, Kind: a.Kind, Command: a.Command, Cwd: a.Cwd, Reason: a.Reason, Changes: a.Changes,
		RequestID: a.RequestID, TurnID: a.TurnID, Asked: a.Asked, Expires: a.Expires, Text: approvalPrompt(a),
	})
}
