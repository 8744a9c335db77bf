package appserver_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// compactPrompt is how codex 0.171's compaction request to the model begins (its last user
// message); summaryText is what the mock answers it.
const (
	compactPrompt = "You are performing a CONTEXT CHECKPOINT COMPACTION"
	summaryText   = "SUMMARY: the user sent three earlier messages"
)

// summarizing answers codex's compaction request with summaryText, and the rest as the default
// script does.
func summarizing(req mockmodel.Request) mockmodel.Reply {
	if strings.Contains(req.LastUserText, compactPrompt) {
		return mockmodel.Reply{Text: summaryText}
	}
	return mockmodel.DefaultScript(req)
}

// On real codex, thread/compact/start runs as a turn of the thread (turn/started, a
// contextCompaction item, turn/completed), asks the model for a summary with the whole history
// and the compaction prompt, and the thread's next request carries the summary and the user's
// messages instead of the earlier turns' answers; the conversation goes on.
func TestRealCompactThread(t *testing.T) {
	t.Parallel()
	e := newRealEnv(t, mockmodel.Config{Script: summarizing})
	ctx := ctxTimeout(t, 2*time.Minute)
	c := e.start(t, nil)
	id, err := c.StartThread(ctx, appserver.ThreadOptions{Cwd: e.cwd})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		mustComplete(t, c, ctx, id, fmt.Sprintf("earlier message %d", i+1))
	}
	reqs := e.mock.Requests()
	if !strings.Contains(fullInput(reqs[len(reqs)-1]), "reply #2: earlier message 2") {
		t.Fatalf("before compaction the third turn's request lacks the second turn's answer")
	}
	before := len(reqs)

	r, err := c.CompactThread(ctx, id)
	if err != nil || r.Status != protocol.TurnCompleted || r.TurnID == "" {
		t.Fatalf("compact: %v (result %+v)", err, r)
	}
	if got := itemTypes(t, r.Notifications); !slices.Contains(got, protocol.ItemContextCompaction) {
		t.Errorf("compaction items %v, want a %s", got, protocol.ItemContextCompaction)
	}
	reqs = e.mock.Requests()
	if len(reqs) != before+1 || !strings.Contains(reqs[before].LastUserText, compactPrompt) {
		t.Fatalf("compaction made %d model requests, want 1 ending in the compaction prompt", len(reqs)-before)
	}
	if in := fullInput(reqs[before]); !strings.Contains(in, "reply #3: earlier message 3") {
		t.Errorf("the compaction request does not carry the history to summarize")
	}

	mustComplete(t, c, ctx, id, "after compaction")
	reqs = e.mock.Requests()
	next := fullInput(reqs[len(reqs)-1])
	for _, want := range []string{summaryText, "earlier message 1", "after compaction"} {
		if !strings.Contains(next, want) {
			t.Errorf("the request after compaction lacks %q", want)
		}
	}
	for _, gone := range []string{"reply #1:", "reply #2:", "reply #3:", compactPrompt} {
		if strings.Contains(next, gone) {
			t.Errorf("the request after compaction still carries %q: the earlier turns, not the summary", gone)
		}
	}
	if got := reqs[len(reqs)-1].LastUserText; got != "after compaction" {
		t.Errorf("last user text %q", got)
	}
}

// fullInput is a request's whole conversation as one string.
func fullInput(req mockmodel.Request) string {
	var b strings.Builder
	for _, in := range req.Input {
		b.Write(in)
		b.WriteByte('\n')
	}
	return b.String()
}

// itemTypes lists the types of the items of item/completed notifications.
func itemTypes(t *testing.T, ns []protocol.Notification) []string {
	t.Helper()
	var out []string
	for _, n := range ns {
		if n.Method != protocol.NotifyItemCompleted {
			continue
		}
		var p struct {
			Item struct {
				Type string `json:"type"`
			} `json:"item"`
		}
		if err := json.Unmarshal(n.Params, &p); err != nil {
			t.Fatal(err)
		}
		out = append(out, p.Item.Type)
	}
	return out
}
