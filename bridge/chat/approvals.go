package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/protocol"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// Approvals asked in the chat (--approval ask): the turn's approval request is shown to the chat
// and the chat's /approve, /approve session or /deny answers it, beside the chat's queue.

// helpApprovals is /help's line for the approval commands (--approval ask only).
const helpApprovals = "/approve N, /approve N session, /deny N: answer approval N, what codex asks to run or change (session: allow it for the rest of the conversation; N may be left out when only one approval is waiting)"

// textApprovalsOff answers /approve and /deny where approvals are not asked in the chat.
const textApprovalsOff = "approvals are not asked in this chat: the daemon answers codex's requests itself (its --approval setting is not ask), so there is nothing to approve or deny"

// maxPromptCommandBytes bounds the command (and each diff line count) shown in a prompt.
const maxPromptCommandBytes = 2000

// maxPromptFiles bounds the files listed in a file change prompt.
const maxPromptFiles = 20

// ApprovalPrompt is the message that shows the chat what codex asks and how to answer.
func ApprovalPrompt(a supervisor.Approval) string {
	var b strings.Builder
	// The number is what /approve N and /deny N name: with two prompts pending, each answer
	// says which it is for.
	fmt.Fprintf(&b, "Approval %d", a.Seq)
	if a.AskedOf != "" && a.AskedOf != a.ChatKey {
		// Asked of another chat (a peer's turn asks the canvas): say whose turn it is.
		fmt.Fprintf(&b, ", for chat %s", a.ChatKey)
	}
	b.WriteString(": ")
	n := a.Seq
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
		fmt.Fprintf(&b, "Answer /approve %d to apply the changes, /approve %d session to allow changes for the rest of this conversation, or /deny %d.", n, n, n)
	default:
		b.WriteString("codex asks to run a command")
		if a.Reason != "" {
			fmt.Fprintf(&b, " (%s)", CapText(a.Reason, maxPromptCommandBytes))
		}
		// Whole: the supervisor declines, without asking, a command too long to show
		// (supervisor.MaxApprovalCommandBytes).
		fmt.Fprintf(&b, ":\n  %s\n", visible(a.Command))
		if a.Cwd != "" {
			fmt.Fprintf(&b, "in %s\n", visible(a.Cwd))
		}
		fmt.Fprintf(&b, "Answer /approve %d to run it, /approve %d session to allow it for the rest of this conversation, or /deny %d.", n, n, n)
	}
	if d := time.Until(a.Expires); d > 0 {
		fmt.Fprintf(&b, " Without an answer it is declined in %s.", d.Round(time.Second))
	}
	return b.String()
}

// visible makes every character of s show: control and format characters (a carriage return,
// an escape sequence, a bidirectional override, a zero-width space) are written as \u escapes,
// so a prompt cannot look like something other than what runs. Newlines and tabs stay.
func visible(s string) string {
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		if r != '\n' && r != '\t' && (unicode.IsControl(r) || unicode.Is(unicode.Cf, r)) {
			fmt.Fprintf(&b, "\\u%04x", r)
			continue
		}
		b.WriteRune(r)
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

// approvalArgs reads the words after /approve or /deny: an approval's number (0 when none) and,
// for /approve, "session". ok is false for anything else.
func approvalArgs(cmd Command) (n uint64, session, ok bool) {
	for _, w := range strings.Fields(strings.ToLower(cmd.Args)) {
		switch v, err := strconv.ParseUint(strings.TrimPrefix(w, "#"), 10, 64); {
		case err == nil && v > 0 && n == 0:
			n = v
		case w == "session" && cmd.Name == cmdApprove && !session:
			session = true
		default:
			return 0, false, false
		}
	}
	return n, session, true
}

// approvalWhat names what an approval is for, in an answer: its command or how many files.
func approvalWhat(a supervisor.Approval, limit int) string {
	if a.Kind == appserver.ApprovalFileChange {
		return fmt.Sprintf("changes to %d files", len(a.Changes))
	}
	return CapText(a.Command, limit)
}

// answerApproval carries out /approve, /approve session and /deny, each with an optional
// approval number: a bare answer applies only when one approval waits, and the reply says which
// one it applied to.
func answerApproval(c Controls, chatKey string, cmd Command) string {
	n, session, ok := approvalArgs(cmd)
	if !ok {
		return "use /approve N, /approve N session or /deny N, N being the approval's number (the number may be left out when only one is waiting)"
	}
	decision, verb := protocol.DecisionDecline, "denied"
	if cmd.Name == cmdApprove {
		decision, verb = protocol.DecisionAccept, "approved"
		if session {
			decision = protocol.DecisionAcceptForSession
		}
	}
	a, err := c.Answer(chatKey, n, decision)
	switch {
	case errors.Is(err, supervisor.ErrWhichApproval):
		return whichApproval(c.PendingApprovals(chatKey))
	case err != nil && n != 0:
		text := fmt.Sprintf("approval %d is not waiting for your answer (answered, declined when it timed out, or its turn ended)", n)
		if list := c.PendingApprovals(chatKey); len(list) > 0 {
			text += "; " + whichApproval(list)
		}
		return text
	case err != nil:
		return "nothing is waiting for your approval"
	}
	text := fmt.Sprintf("%s %d: %s", verb, a.Seq, approvalWhat(a, maxPromptCommandBytes))
	if session {
		text = fmt.Sprintf("%s %d for the rest of this conversation: %s", verb, a.Seq, approvalWhat(a, maxPromptCommandBytes))
	}
	return text
}

// maxWhichCommandBytes bounds each command named in the list of approvals to choose from: the
// prompts above show them whole.
const maxWhichCommandBytes = 200

// whichApproval asks which of several waiting approvals an answer is for; nothing was answered.
func whichApproval(list []supervisor.Approval) string {
	if len(list) == 0 {
		return "nothing is waiting for your approval"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d approvals are waiting and nothing was answered: say which, e.g. /approve %d or /deny %d:", len(list), list[0].Seq, list[0].Seq)
	for _, a := range list {
		fmt.Fprintf(&b, "\n  %d: %s", a.Seq, approvalWhat(a, maxWhichCommandBytes))
	}
	return b.String()
}
