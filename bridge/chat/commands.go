package chat

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/molecule-ai/codex-warm/supervisor"
)

// Controls is the part of *supervisor.Supervisor the chat commands use. Its methods must not wait
// behind the chat's queue: a command is answered while the chat's turn still runs.
type Controls interface {
	Stop(chatKey string) supervisor.StopResult
	Reset(ctx context.Context, chatKey string) (supervisor.ResetResult, error)
	ChatStatus(chatKey string) (row supervisor.ChildStatus, ok bool, lastErr string)
	// AsksApprovals reports whether approvals are asked in the chat (--approval ask).
	AsksApprovals() bool
	// Answer decides the approval numbered n waiting for the chat's answer, or with n 0 the only
	// one (supervisor.ErrWhichApproval when several wait, ErrNoApproval when none matches).
	Answer(chatKey string, n uint64, decision string) (supervisor.Approval, error)
	// PendingApprovals returns the approvals waiting for the chat's answer, oldest first.
	PendingApprovals(chatKey string) []supervisor.Approval
	// WaitApproval waits for an approval of the chat with a Seq above after.
	WaitApproval(ctx context.Context, chatKey string, after uint64) (supervisor.Approval, error)
}

// CmdStop is the name of /stop (alias /cancel): an inbox drops the chat's messages it still holds
// before it runs the command.
const CmdStop = "stop"

// CmdNew is the name of /new (alias /reset): an inbox that still holds messages of the chat sent
// before it must hand them to the supervisor before the Reset, so they finish on the old thread.
const CmdNew = "new"

// Chat command names, after aliases are resolved.
const (
	cmdStatus = "status"
	cmdHelp   = "help"
	// cmdApprove and cmdDeny answer an approval asked in the chat (approvals.go).
	cmdApprove = "approve"
	cmdDeny    = "deny"
)

// commandNames maps what a user may type (lowercased, without the slash) to a command.
var commandNames = map[string]string{
	"stop": CmdStop, "cancel": CmdStop,
	"new": CmdNew, "reset": CmdNew,
	"status":  cmdStatus,
	"help":    cmdHelp,
	"approve": cmdApprove,
	"deny":    cmdDeny,
	"model":   cmdModel,
	"effort":  cmdEffort,
	"compact": cmdCompact,
	"undo":    CmdUndo,
}

// Command is a chat message that is a command: its name (CmdStop, …) and the text after it.
type Command struct {
	// Name is the command without its slash, aliases resolved (CmdStop for /cancel).
	Name string
	// Args is the text after the name, trimmed ("session" in /approve session).
	Args string
}

// ParseCommand recognises a message whose text is exactly a command: "/name" or "/name args",
// case-insensitive, surrounding white space ignored. Anything else, an unknown "/word" included
// (users paste paths such as /etc/hosts), is ordinary text for codex.
func ParseCommand(text string) (Command, bool) {
	t := strings.TrimSpace(text)
	if !strings.HasPrefix(t, "/") {
		return Command{}, false
	}
	word, args, _ := strings.Cut(t[1:], " ")
	if i := strings.IndexAny(word, "\t\n\r"); i >= 0 {
		word, args = word[:i], strings.TrimSpace(word[i:]+" "+args)
	}
	name, ok := commandNames[strings.ToLower(word)]
	if !ok {
		return Command{}, false
	}
	return Command{Name: name, Args: strings.TrimSpace(args)}, true
}

// helpText lists the commands the chat can use: /approve and /deny only when approvals are
// asked in the chat, since elsewhere they could never apply.
func helpText(asksApprovals bool) string {
	var b strings.Builder
	b.WriteString(`Commands (send the command alone as a message):
/stop (or /cancel): stop what codex is doing for this chat and drop the messages waiting behind it
/new (or /reset): start over; your next message opens a new conversation
/status: what this chat's codex session is doing
`)
	b.WriteString(helpSettings)
	if asksApprovals {
		b.WriteString(helpApprovals + "\n")
	}
	b.WriteString(`/help: this list
Anything else, including other /words, goes to codex as you typed it.`)
	return b.String()
}

// RunCommand carries out cmd for chatKey and returns the answer to send to the chat. dropped is
// how many of the chat's messages the inbox itself dropped for a /stop (messages it had not yet
// handed to the supervisor); it is added to the count.
func RunCommand(ctx context.Context, c Controls, chatKey string, cmd Command, dropped int) string {
	if o, ok := c.(CommandObserver); ok {
		o.ObserveCommand(cmd.Name)
	}
	if text, ok := runSettingsCommand(ctx, c, chatKey, cmd); ok {
		return text
	}
	switch cmd.Name {
	case CmdStop:
		res := c.Stop(chatKey)
		n := res.Dropped + dropped
		if res.Interrupted {
			n++
		}
		if n == 0 {
			return "nothing to stop"
		}
		return fmt.Sprintf("stopped %d", n)
	case CmdNew:
		res, err := c.Reset(ctx, chatKey)
		switch {
		case err != nil:
			return "could not start over: " + CapText(err.Error(), maxErrInReply)
		case res.Deferred:
			return "starting over once the message codex is working on is answered: the message after that opens a new conversation (use /stop first to start over now)"
		case res.OldThreadID != "":
			return fmt.Sprintf("started over: your next message opens a new conversation (the previous one, thread %s, is kept)", res.OldThreadID)
		default:
			return "started over: your next message opens a new conversation"
		}
	case cmdStatus:
		text := statusText(c.ChatStatus(chatKey))
		if mc, ok := c.(ModelControls); ok {
			r := mc.Resolve(chatKey)
			text += fmt.Sprintf("\nmodel %s (from %s), effort %s (from %s)", orCodexDefault(r.Model), r.ModelFrom, orCodexDefault(r.Effort), r.EffortFrom)
		}
		if u, ok := c.(UsageSource); ok {
			text += "\n" + usageStatusText(u, chatKey, time.Now())
		}
		for _, a := range c.PendingApprovals(chatKey) {
			text += "\n" + ApprovalPrompt(a)
		}
		return text
	case cmdApprove, cmdDeny:
		if !c.AsksApprovals() {
			return textApprovalsOff
		}
		return answerApproval(c, chatKey, cmd)
	default:
		return helpText(c.AsksApprovals())
	}
}

// statusText is the chat's line of the process table, as a sentence.
func statusText(row supervisor.ChildStatus, ok bool, lastErr string) string {
	var b strings.Builder
	if !ok {
		b.WriteString("no codex session is running for this chat; the next message starts one")
		if row.Queued > 0 {
			fmt.Fprintf(&b, " (%d queued)", row.Queued)
		}
	} else {
		fmt.Fprintf(&b, "codex pid %d is %s", row.PID, row.State)
		if row.State == supervisor.StateBusy {
			fmt.Fprintf(&b, " (for %s)", row.TurnAge.Round(100*time.Millisecond))
			if a := row.ActivityLine(time.Now()); a != "" {
				fmt.Fprintf(&b, ", now %s", a)
			}
		}
		fmt.Fprintf(&b, "; thread %s; %d turns; %d queued", row.ThreadID, row.Turns, row.Queued)
		if row.PSSBytes > 0 {
			fmt.Fprintf(&b, "; memory %d MB", row.PSSBytes>>20)
		}
		if row.Restarts > 0 {
			fmt.Fprintf(&b, "; restarted %d times", row.Restarts)
		}
	}
	if lastErr != "" {
		fmt.Fprintf(&b, "; last error: %s", CapText(lastErr, maxErrInReply))
	}
	return b.String()
}
