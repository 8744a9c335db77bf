package chat

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/molecule-ai/codex-warm/internal/chatsettings"
	"github.com/molecule-ai/codex-warm/supervisor/chatjob"
)

// The chat's model, effort and history: /model, /effort, /compact and /undo. The inboxes'
// Controls offer them when they also implement ModelControls and JobControls (the daemon's
// Controls do); elsewhere the commands say they are not available.

// Chat command names of this file.
const (
	cmdModel   = "model"
	cmdEffort  = "effort"
	cmdCompact = "compact"
	// CmdUndo is exported for the inboxes: one that holds messages of the chat the supervisor
	// has not seen refuses it as busy.
	CmdUndo = "undo"
)

// ModelControls is what /model and /effort use: each chat's choice (chatsettings.Store), and
// whether peers may choose.
type ModelControls interface {
	Resolve(chatKey string) chatsettings.Resolved
	SetModel(chatKey, name string) (chatsettings.ModelChange, error)
	SetEffort(chatKey, level string) (chatsettings.Resolved, error)
	AllowedModels() []string
	AllowedEfforts(model string) []string
	// PeersMayChoose reports whether a peer agent's /model and /effort are obeyed (an operator
	// flag, off by default).
	PeersMayChoose() bool
}

// JobControls is what /compact and /undo use (chatjob.Jobs).
type JobControls interface {
	Compact(ctx context.Context, chatKey string) (chatjob.CompactResult, error)
	Undo(ctx context.Context, chatKey string, n int) (chatjob.UndoResult, error)
}

// CommandObserver, when the Controls implement it, counts each command answered, by name
// (aliases resolved): the metrics count commands, never chats.
type CommandObserver interface {
	ObserveCommand(name string)
}

const (
	textNotAvailable = "this command is not available here"
	textPeerRefused  = "a peer agent may not choose this chat's model or effort: models differ in cost (the operator can allow it)"
	textUndoUsage    = "usage: /undo [N]: take back the last N exchanges (1 to %d; default 1)"
)

// isPeer reports a peer agent's chat: its text is another agent's output.
func isPeer(chatKey string) bool { return strings.HasPrefix(chatKey, "peer:") }

// runSettingsCommand answers /model, /effort, /compact and /undo; ok is false for other commands.
func runSettingsCommand(ctx context.Context, c Controls, chatKey string, cmd Command) (answer string, ok bool) {
	switch cmd.Name {
	case cmdModel, cmdEffort:
		mc, has := c.(ModelControls)
		switch {
		case !has:
			return textNotAvailable, true
		case cmd.Args != "" && isPeer(chatKey) && !mc.PeersMayChoose():
			return textPeerRefused, true
		case cmd.Name == cmdModel:
			return modelCommand(mc, chatKey, cmd.Args), true
		default:
			return effortCommand(mc, chatKey, cmd.Args), true
		}
	case cmdCompact, CmdUndo:
		jc, has := c.(JobControls)
		if !has {
			return textNotAvailable, true
		}
		if cmd.Name == cmdCompact {
			return compactCommand(ctx, jc, chatKey), true
		}
		return undoCommand(ctx, jc, chatKey, cmd.Args), true
	}
	return "", false
}

func modelCommand(mc ModelControls, chatKey, arg string) string {
	if arg == "" {
		r := mc.Resolve(chatKey)
		return fmt.Sprintf("model: %s (from %s); effort: %s (from %s)\nmay choose: %s\n(/model NAME, or /model default)",
			orCodexDefault(r.Model), r.ModelFrom, orCodexDefault(r.Effort), r.EffortFrom, marked(mc.AllowedModels(), r.Model))
	}
	ch, err := mc.SetModel(chatKey, arg)
	if err != nil {
		return refusal(err)
	}
	var b strings.Builder
	if ch.ModelFrom == chatsettings.FromChat {
		fmt.Fprintf(&b, "model for this chat: %s", ch.Model)
	} else {
		fmt.Fprintf(&b, "model back to the default: %s (from %s)", orCodexDefault(ch.Model), ch.ModelFrom)
	}
	fmt.Fprintf(&b, "; effort: %s (from %s). Your next message runs on it, in this conversation.", orCodexDefault(ch.Effort), ch.EffortFrom)
	if ch.DroppedEffort != "" {
		fmt.Fprintf(&b, "\nThe effort you chose, %s, is not one %s supports: it runs with %s.", ch.DroppedEffort, orCodexDefault(ch.Model), orCodexDefault(ch.Effort))
	}
	return b.String()
}

func effortCommand(mc ModelControls, chatKey, arg string) string {
	if arg == "" {
		r := mc.Resolve(chatKey)
		return fmt.Sprintf("effort: %s (from %s) on model %s\nmay choose: %s\n(/effort LEVEL, or /effort default)",
			orCodexDefault(r.Effort), r.EffortFrom, orCodexDefault(r.Model), marked(mc.AllowedEfforts(r.Model), r.Effort))
	}
	r, err := mc.SetEffort(chatKey, arg)
	if err != nil {
		return refusal(err)
	}
	if r.EffortFrom == chatsettings.FromChat {
		return fmt.Sprintf("effort for this chat: %s, on model %s. Your next message runs with it.", r.Effort, orCodexDefault(r.Model))
	}
	return fmt.Sprintf("effort back to the default: %s (from %s), on model %s", orCodexDefault(r.Effort), r.EffortFrom, orCodexDefault(r.Model))
}

// refusal answers a refused /model or /effort: nothing changed.
func refusal(err error) string {
	var na *chatsettings.NotAllowedError
	if errors.As(err, &na) {
		return na.Error() + "; nothing changed"
	}
	return "nothing changed: " + CapText(err.Error(), maxErrInReply)
}

func orCodexDefault(s string) string {
	if s == "" {
		return "codex's default"
	}
	return s
}

// marked lists names with the current one marked.
func marked(names []string, current string) string {
	if len(names) == 0 {
		return "nothing but default"
	}
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = n
		if n == current {
			out[i] = n + " (current)"
		}
	}
	return strings.Join(out, ", ")
}

func compactCommand(ctx context.Context, jc JobControls, chatKey string) string {
	res, err := jc.Compact(ctx, chatKey)
	switch {
	case errors.Is(err, chatjob.ErrNoConversation):
		return "nothing to compact: this chat has no conversation yet"
	case err != nil:
		return "could not compact: " + CapText(err.Error(), maxErrInReply)
	}
	var b strings.Builder
	b.WriteString("compacted")
	if res.Waited {
		b.WriteString(" (after the messages codex was working on)")
	}
	if res.Before > 0 || res.After > 0 {
		fmt.Fprintf(&b, ": the conversation went from about %d tokens to about %d", res.Before, res.After)
	}
	b.WriteString("; it goes on from the summary")
	return b.String()
}

func undoCommand(ctx context.Context, jc JobControls, chatKey, arg string) string {
	n := 1
	if arg != "" {
		v, err := strconv.Atoi(arg)
		if err != nil || v < 1 || v > chatjob.MaxUndo {
			return fmt.Sprintf(textUndoUsage, chatjob.MaxUndo)
		}
		n = v
	}
	res, err := jc.Undo(ctx, chatKey, n)
	var rng *chatjob.UndoRangeError
	switch {
	case errors.Is(err, chatjob.ErrNoConversation):
		return "nothing to take back: this chat has no conversation yet"
	case errors.Is(err, chatjob.ErrChatBusy):
		return "not now: a message of this chat is running or waiting (use /stop first, or wait for the answer)"
	case errors.Is(err, chatjob.ErrUndoCompacted):
		return "cannot take that back: the conversation was compacted since, and what came before is only in its summary"
	case errors.As(err, &rng):
		return fmt.Sprintf("cannot take back %d: the conversation has only %d exchange(s) since its start (or its last compaction)", rng.Asked, rng.Exchanges)
	case err != nil:
		return "could not take back: " + CapText(err.Error(), maxErrInReply)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "took back %d exchange(s); codex no longer sees:", len(res.Messages))
	for _, m := range res.Messages {
		fmt.Fprintf(&b, "\n- %q", CapText(m, 200))
	}
	if len(res.Files) > 0 {
		fmt.Fprintf(&b, "\nFiles those turns changed stay changed: %s", strings.Join(res.Files, ", "))
	} else {
		b.WriteString("\nThose turns changed no file.")
	}
	return b.String()
}

// helpSettings is /help's part for this file's commands, with what each costs.
const helpSettings = `/model [NAME | default]: show or choose this chat's model, e.g. /model gpt-5 (models differ in price per message)
/effort [LEVEL | default]: show or choose how hard the model reasons, e.g. /effort high (more effort: slower, costlier replies)
/compact: shorten this conversation to a summary (one model call now; later replies read less)
/undo [N]: take back the last N exchanges, e.g. /undo 2 (no model call; files they changed stay changed)
`
