package progress

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// What a running turn is doing (Activity), besides the per-item texts of describeItem.
const (
	Starting = "starting"
	Thinking = "thinking"
	Writing  = "writing"
	Waiting  = "waiting for approval"
)

// commandMax caps the command shown in an activity; the status table and the platform's
// heartbeat show one line per chat.
const commandMax = 80

// Activity is what a running turn is doing now and since when, from the turn's notifications.
// It changes on item/started, on a tool's item/completed (the model reads the result: thinking)
// and on thread/status/changed (waiting on a person); deltas and token usage leave it alone, so
// its since is when the current step began.
type Activity struct {
	// progress, when set, gets each step of the turn (With).
	progress func(Step)

	mu    sync.Mutex
	what  string
	since time.Time
}

func NewActivity(progress func(Step)) *Activity {
	return &Activity{progress: progress, what: Starting, since: time.Now()}
}

// started reports the turn's start to the progress observer, once codex answered turn/start.
func (a *Activity) Started(turnID string) {
	if a.progress != nil {
		a.progress(Step{Kind: TurnStarted, TurnID: turnID})
	}
}

// observe takes each notification of the turn (TurnOptions.OnNotification).
func (a *Activity) Observe(n protocol.Notification) {
	if a.progress != nil {
		if p, ok := Of(n); ok {
			a.progress(p)
		}
	}
	var what string
	switch n.Method {
	case protocol.NotifyItemStarted:
		what = describeItem(n.Params)
	case protocol.NotifyItemCompleted:
		if IsToolItem(n.Params) {
			what = Thinking
		}
	case protocol.NotifyThreadStatus:
		if WaitingOnPerson(n.Params) {
			what = Waiting
		}
	}
	if what == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if what != a.what {
		a.what, a.since = what, time.Now()
	}
}

func (a *Activity) Get() (string, time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.what, a.since
}

// describeItem is the one-line activity of an item/started: "" for an item that says nothing
// of what the turn does (the user's own message).
func describeItem(params json.RawMessage) string {
	if typ, ok := appserver.ItemType(params); ok && (typ == protocol.ItemUserMessage || typ == "") {
		return "" // what the full decode below makes of it too, and the item may be long
	}
	var n protocol.ItemNotification
	if json.Unmarshal(params, &n) != nil {
		return ""
	}
	it, err := protocol.DecodeItem(n.Item)
	if err != nil {
		return ""
	}
	switch it.Type {
	case protocol.ItemCommandExecution:
		return "running " + strconv.Quote(truncateRunes(unwrapShell(it.Command), commandMax))
	case protocol.ItemFileChange:
		if len(it.Changes) == 1 {
			return "editing 1 file"
		}
		return fmt.Sprintf("editing %d files", len(it.Changes))
	case protocol.ItemMCPToolCall:
		return "calling " + it.Server + "." + it.Tool
	case protocol.ItemDynamicToolCall:
		return "calling " + it.Tool
	case protocol.ItemReasoning:
		return Thinking
	case protocol.ItemAgentMessage:
		return Writing
	case protocol.ItemUserMessage, "":
		return ""
	}
	return it.Type
}

// unwrapShell drops the shell codex wraps a command in (`/bin/bash -lc 'npm test'`), so that
// the activity shows the command the model asked for. A command quoted any other way is kept.
func unwrapShell(cmd string) string {
	for _, sh := range []string{"/bin/bash", "bash", "/bin/sh", "sh", "/bin/zsh", "zsh"} {
		for _, flag := range []string{" -c '", " -lc '"} {
			inner, ok := strings.CutPrefix(cmd, sh+flag)
			if ok && strings.HasSuffix(inner, "'") && !strings.Contains(inner[:len(inner)-1], "'") {
				return inner[:len(inner)-1]
			}
		}
	}
	return cmd
}

func truncateRunes(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// IsToolItem reports whether item/started or item/completed params are of a tool call: a
// command, a file change, an MCP or client tool call.
func IsToolItem(params json.RawMessage) bool {
	typ, ok := appserver.ItemType(params)
	if !ok {
		return false
	}
	switch typ {
	case protocol.ItemCommandExecution, protocol.ItemFileChange, protocol.ItemMCPToolCall, protocol.ItemDynamicToolCall:
		return true
	}
	return false
}

// WaitingOnPerson reports whether thread/status/changed params say the thread waits on a
// person: active with the waitingOnApproval or waitingOnUserInput flag.
func WaitingOnPerson(params json.RawMessage) bool {
	var p protocol.ThreadStatusNotification
	if json.Unmarshal(params, &p) != nil || p.Status.Type != protocol.ThreadStatusActive {
		return false
	}
	for _, f := range p.Status.ActiveFlags {
		if f == protocol.FlagWaitingOnApproval || f == protocol.FlagWaitingOnUserInput {
			return true
		}
	}
	return false
}
