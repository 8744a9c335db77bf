package supervisor

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/protocol"
)

// Activity texts of a running turn besides the per-item ones of describeItem.
const (
	ActivityStarting = "starting"
	ActivityThinking = "thinking"
	ActivityWriting  = "writing"
	ActivityWaiting  = "waiting for approval"
)

// activityCommandMax caps the command shown in an activity; the status table and the platform's
// heartbeat show one line per chat.
const activityCommandMax = 80

// activity is what a running turn is doing now and since when, from the turn's notifications.
// It changes on item/started, on a tool's item/completed (the model reads the result: thinking)
// and on thread/status/changed (waiting on a person); deltas and token usage leave it alone, so
// its since is when the current step began.
type activity struct {
	// progress, when set, gets each step of the turn (WithProgress).
	progress func(TurnProgress)

	mu    sync.Mutex
	what  string
	since time.Time
}

func newActivity(progress func(TurnProgress)) *activity {
	return &activity{progress: progress, what: ActivityStarting, since: time.Now()}
}

// started reports the turn's start to the progress observer, once codex answered turn/start.
func (a *activity) started(turnID string) {
	if a.progress != nil {
		a.progress(TurnProgress{Kind: ProgressTurnStarted, TurnID: turnID})
	}
}

// observe takes each notification of the turn (TurnOptions.OnNotification).
func (a *activity) observe(n protocol.Notification) {
	if a.progress != nil {
		if p, ok := progressOfNotification(n); ok {
			a.progress(p)
		}
	}
	var what string
	switch n.Method {
	case protocol.NotifyItemStarted:
		what = describeItem(n.Params)
	case protocol.NotifyItemCompleted:
		if isToolItem(n.Params) {
			what = ActivityThinking
		}
	case protocol.NotifyThreadStatus:
		if waitingOnPerson(n.Params) {
			what = ActivityWaiting
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

func (a *activity) get() (string, time.Time) {
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
		return "running " + strconv.Quote(truncateRunes(unwrapShell(it.Command), activityCommandMax))
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
		return ActivityThinking
	case protocol.ItemAgentMessage:
		return ActivityWriting
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

// ActivityLine is the row's activity with its age as of now, as the status table, /status and
// the platform's heartbeat show it: `running "npm test" (2m10s)`. Empty when no turn runs.
func (c ChildStatus) ActivityLine(now time.Time) string {
	if c.Activity == "" {
		return ""
	}
	return fmt.Sprintf("%s (%s)", c.Activity, max(now.Sub(c.ActivitySince), 0).Round(time.Second))
}

// ChatActivity is what one chat's running turn is doing; see ChildStatus.Activity.
type ChatActivity struct {
	ChatKey string
	What    string
	Since   time.Time
}

// Activity lists the chats whose turn is running and what each does now, sorted by chat key.
// Unlike Status it reads no /proc files, so a frequent caller (the platform heartbeat) costs
// only the pool lock.
func (s *Supervisor) Activity() []ChatActivity {
	return s.chats.activity()
}

func (c *chats) activity() []ChatActivity {
	type live struct {
		key string
		act *activity
	}
	c.mu.Lock()
	var lives []live
	for _, k := range c.keys {
		if k.live != nil && k.live.act != nil {
			lives = append(lives, live{k.key, k.live.act})
		}
	}
	c.mu.Unlock()
	out := make([]ChatActivity, len(lives))
	for i, l := range lives {
		out[i].ChatKey = l.key
		out[i].What, out[i].Since = l.act.get()
	}
	slices.SortFunc(out, func(a, b ChatActivity) int { return strings.Compare(a.ChatKey, b.ChatKey) })
	return out
}
