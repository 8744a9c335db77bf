package chat

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/protocol"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// Approvals asked in the chat (--approval ask): the turn's approval request is shown to the chat
// and the chat's /approve, /approve session or /deny answers it, beside the chat's queue.

// helpApprovals is /help's line for the approval commands (--approval ask only).
const helpApprovals = "/approve, /approve session, /deny: answer what codex asks to run or change (session: allow it for the rest of the conversation)"

// textApprovalsOff answers /approve and /deny where approvals are not asked in the chat.
const textApprovalsOff = "approvals are not asked in this chat: the daemon answers codex's requests itself (its --approval setting is not ask), so there is nothing to approve or deny"

// maxPromptCommandBytes bounds the command (and each diff line count) shown in a prompt.
const maxPromptCommandBytes = 2000

// maxPromptFiles bounds the files listed in a file change prompt.
const maxPromptFiles = 20

// ApprovalPrompt is the message that shows the chat what codex asks and how to answer.
func ApprovalPrompt(a supervisor.Approval) string {
	var b strings.Builder
	if a.AskedOf != "" && a.AskedOf != a.ChatKey {
		// Asked of another chat (a peer's turn asks the canvas): say whose turn it is.
		fmt.Fprintf(&b, "In chat %s, ", a.ChatKey)
	}
	switch a.Kind {
	case appserver.ApprovalFileChange:
		b.WriteString("codex asks to change files")
		if a.Reason != "" {
			fmt.Fprintf(&b, " (%s)", CapText(a.Reason, maxPromptCommandBytes))
		}
		b.WriteString(":\n")
		for i, c := range a.Changes {
			if i == maxPromptFiles {
				fmt.Fprintf(&b, "  ... and %d more\n", len(a.Changes)-i)
				break
			}
			fmt.Fprintf(&b, "  %s %s (%d diff lines)\n", changeKind(c.Kind), CapText(c.Path, 300), strings.Count(c.Diff, "\n"))
		}
		if len(a.Changes) == 0 {
			b.WriteString("  (codex did not say which)\n")
		}
		b.WriteString("Answer /approve to apply the changes, /approve session to allow changes for the rest of this conversation, or /deny.")
	default:
		b.WriteString("codex asks to run a command")
		if a.Reason != "" {
			fmt.Fprintf(&b, " (%s)", CapText(a.Reason, maxPromptCommandBytes))
		}
		fmt.Fprintf(&b, ":\n  %s\n", CapText(a.Command, maxPromptCommandBytes))
		if a.Cwd != "" {
			fmt.Fprintf(&b, "in %s\n", CapText(a.Cwd, 300))
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
func answerApproval(c Controls, chatKey string, cmd Command) string {
	decision, verb := protocol.DecisionDecline, "denied"
	if cmd.Name == cmdApprove {
		decision, verb = protocol.DecisionAccept, "approved"
		switch strings.ToLower(cmd.Args) {
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
	return verb + ": " + CapText(what, maxPromptCommandBytes)
}
