package supervisor

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/molecule-ai/codex-warm/supervisor/progress"
)

// Activity texts of a running turn besides the per-item ones (package progress).
const (
	ActivityStarting = progress.Starting
	ActivityThinking = progress.Thinking
	ActivityWriting  = progress.Writing
	ActivityWaiting  = progress.Waiting
)

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
// only a moment of the state table's lock.
func (s *Supervisor) Activity() []ChatActivity {
	return s.chats.activity()
}

func (c *chats) activity() []ChatActivity {
	type live struct {
		key string
		act *progress.Activity
	}
	var lives []live
	c.st.do(func(t *table) {
		t.eachKey(func(k *keyState) {
			if k.live != nil && k.live.act != nil {
				lives = append(lives, live{k.key, k.live.act})
			}
		})
	})
	out := make([]ChatActivity, len(lives))
	for i, l := range lives {
		out[i].ChatKey = l.key
		out[i].What, out[i].Since = l.act.Get()
	}
	slices.SortFunc(out, func(a, b ChatActivity) int { return strings.Compare(a.ChatKey, b.ChatKey) })
	return out
}
