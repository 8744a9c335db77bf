// Package progress says what a chat's running turn is doing, from its notifications: its steps as
// they happen (Step, for a caller that asked with With) and the one line the status table, /status
// and the platform's heartbeat show (Activity). It knows no child, chat or queue.
package progress

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// Kinds of Step.
const (
	TurnStarted   = "turn_started"
	ItemStarted   = "item_started"
	ItemCompleted = "item_completed"
	Delta         = "delta"
)

// Step is one step of a message's running turn; see With.
type Step struct {
	Kind   string `json:"kind"`
	TurnID string `json:"turn_id,omitempty"`
	// ItemID and ItemType name the item of ItemStarted and ItemCompleted, and
	// Summary says in one line what it does or did (`running "npm test"`, `ran "npm test" (exit
	// 0)`, "editing 2 files").
	ItemID   string `json:"item_id,omitempty"`
	ItemType string `json:"item_type,omitempty"`
	Summary  string `json:"summary,omitempty"`
	// Delta is a piece of the agent's text (Delta).
	Delta string `json:"delta,omitempty"`
	// Tool names a completed tool call (ItemCompleted of a command, a file change, an MCP
	// or client tool call, a web search): "shell", "apply_patch", "<server>.<tool>", the client
	// tool's name, "web_search"; ToolArg is its main argument in one short line, and Failed says
	// the call failed (a non-zero exit, a failed or declined status). Empty for other items. The
	// Molecule inbox shows them on the canvas as tool chips.
	Tool    string `json:"tool,omitempty"`
	ToolArg string `json:"tool_arg,omitempty"`
	Failed  bool   `json:"failed,omitempty"`
}

type progressKey struct{}

// With returns a ctx whose message (Submit, Enqueue) reports its turn's steps to fn as
// they happen. It rides on the context rather than a Submit parameter because only the local
// inbox's streaming answer wants it. fn is called from the codex child's reader and must not
// block. It can be called after Submit returned when ctx ended while the turn was running (the
// turn is being interrupted). A message steered into another's turn
// reports nothing: that turn belongs to the other message.
func With(ctx context.Context, fn func(Step)) context.Context {
	return context.WithValue(ctx, progressKey{}, fn)
}

// From returns the observer With put on ctx, or nil. Answerers other than the
// supervisor (test doubles) use it to report steps.
func From(ctx context.Context) func(Step) {
	fn, _ := ctx.Value(progressKey{}).(func(Step))
	return fn
}

// Of turns a notification into a step; ok is false for notifications that
// are not one (token usage, status changes, the user's own message item).
func Of(n protocol.Notification) (p Step, ok bool) {
	switch n.Method {
	case protocol.NotifyAgentMessageDelta:
		var d protocol.AgentMessageDelta
		if json.Unmarshal(n.Params, &d) != nil || d.Delta == "" {
			return p, false
		}
		return Step{Kind: Delta, TurnID: d.TurnID, ItemID: d.ItemID, Delta: d.Delta}, true
	case protocol.NotifyItemStarted, protocol.NotifyItemCompleted:
		var in protocol.ItemNotification
		if json.Unmarshal(n.Params, &in) != nil {
			return p, false
		}
		it, err := protocol.DecodeItem(in.Item)
		if err != nil || it.Type == protocol.ItemUserMessage || it.Type == "" {
			return p, false
		}
		p = Step{TurnID: in.TurnID, ItemID: it.ID, ItemType: it.Type}
		if n.Method == protocol.NotifyItemStarted {
			p.Kind, p.Summary = ItemStarted, describeItem(n.Params)
		} else {
			p.Kind, p.Summary = ItemCompleted, describeDone(it)
			p.Tool, p.ToolArg, p.Failed = toolCall(it, in.Item)
		}
		return p, true
	}
	return p, false
}

// itemWebSearch is codex's web search item; protocol.Item does not carry its query.
const itemWebSearch = "webSearch"

// toolArgMax bounds a tool call's argument as toolCall gives it.
const toolArgMax = 200

// toolCall names a completed item that is a tool call, its main argument and whether it failed;
// tool is "" for items that are not one.
func toolCall(it protocol.Item, raw json.RawMessage) (tool, arg string, failed bool) {
	failed = it.Status == "failed" || it.Status == "declined" || (it.Success != nil && !*it.Success)
	switch it.Type {
	case protocol.ItemCommandExecution:
		return "shell", oneLine(unwrapShell(it.Command)), failed || (it.ExitCode != nil && *it.ExitCode != 0)
	case protocol.ItemFileChange:
		paths := make([]string, 0, len(it.Changes))
		for _, c := range it.Changes {
			paths = append(paths, c.Path)
		}
		return "apply_patch", oneLine(strings.Join(paths, ", ")), failed
	case protocol.ItemMCPToolCall:
		return it.Server + "." + it.Tool, oneLine(string(it.Arguments)), failed
	case protocol.ItemDynamicToolCall:
		return it.Tool, oneLine(string(it.Arguments)), failed
	case itemWebSearch:
		var q struct {
			Query string `json:"query"`
		}
		_ = json.Unmarshal(raw, &q)
		return "web_search", oneLine(q.Query), failed
	}
	return "", "", false
}

// oneLine is s on one line (runs of white space as one space), at most toolArgMax runes.
func oneLine(s string) string {
	return truncateRunes(strings.Join(strings.Fields(s), " "), toolArgMax)
}

// describeDone is the one-line summary of a completed item.
func describeDone(it protocol.Item) string {
	switch it.Type {
	case protocol.ItemCommandExecution:
		s := "ran " + strconv.Quote(truncateRunes(unwrapShell(it.Command), commandMax))
		if it.ExitCode != nil {
			s += fmt.Sprintf(" (exit %d)", *it.ExitCode)
		} else if it.Status != "" {
			s += " (" + it.Status + ")"
		}
		return s
	case protocol.ItemFileChange:
		if len(it.Changes) == 1 {
			return "edited 1 file (" + it.Status + ")"
		}
		return fmt.Sprintf("edited %d files (%s)", len(it.Changes), it.Status)
	case protocol.ItemMCPToolCall:
		return "called " + it.Server + "." + it.Tool + " (" + it.Status + ")"
	case protocol.ItemDynamicToolCall:
		return "called " + it.Tool + " (" + it.Status + ")"
	case protocol.ItemReasoning:
		return "thought"
	case protocol.ItemAgentMessage:
		line, _, _ := strings.Cut(strings.TrimSpace(it.Text), "\n")
		return "wrote: " + truncateRunes(line, commandMax)
	}
	return it.Type
}
