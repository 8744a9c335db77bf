package molecule

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// toolTurns is an answerer whose turn reports n completed tool calls (shell "step <i>", the
// last one failed), spaced by gap, before it answers; a text "peer" turn reports the same.
func toolTurns(n int, gap time.Duration) *chattest.Answerer {
	return chattest.NewAnswerer(func(ctx context.Context, key, text string) (supervisor.Reply, error) {
		if p := supervisor.ProgressFrom(ctx); p != nil {
			for i := range n {
				p(supervisor.TurnProgress{Kind: supervisor.ProgressItemStarted, ItemType: "commandExecution"})
				p(supervisor.TurnProgress{Kind: supervisor.ProgressItemCompleted, ItemType: "commandExecution",
					Tool: "shell", ToolArg: fmt.Sprintf("step %d", i+1), Failed: i == n-1})
				time.Sleep(gap)
			}
		}
		return chattest.EchoReply(key, text), nil
	})
}

// A canvas turn's tool calls become agent_log rows as the runtime posts them, one a second at
// most: calls a second apart each get a chip; a burst becomes one chip, its latest call, naming
// how many more it stands for. A peer's turn sends none.
func TestToolChips(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	synctest.Test(t, func(t *testing.T) {
		m, stop := bubbleInbox(t, p, t.TempDir(), toolTurns(3, 2*time.Second), func(c *Config) { c.ToolChips = true })
		p.Enqueue(moleculetest.CanvasMessage("spaced"))
		time.Sleep(30 * time.Second)
		logs := p.AgentLogs()
		if len(logs) != 3 {
			t.Fatalf("%d chips for 3 calls 2 s apart, want 3: %+v", len(logs), logs)
		}
		for i, l := range logs {
			wantStatus := "ok"
			if i == 2 {
				wantStatus = "error"
			}
			if l.ActivityType != "agent_log" || l.Method != "shell" || l.Summary != fmt.Sprintf("🛠 shell(step %d)", i+1) ||
				l.Status != wantStatus || l.SourceID != p.WorkspaceID() || l.TargetID != p.WorkspaceID() {
				t.Errorf("chip %d = %+v", i, l)
			}
		}
		stop()
		if s := m.Stats(); s.Chips.Sent != 3 || s.Chips.Dropped != 0 {
			t.Errorf("chip stats %+v", s.Chips)
		}
	})
	p2 := moleculetest.NewPlatform(t, moleculetest.Config{})
	synctest.Test(t, func(t *testing.T) {
		m, stop := bubbleInbox(t, p2, t.TempDir(), toolTurns(5, 0), func(c *Config) { c.ToolChips = true })
		p2.Enqueue(moleculetest.CanvasMessage("burst"))
		time.Sleep(30 * time.Second)
		p2.Enqueue(moleculetest.PeerMessage("ws-peer-1", "from a peer"))
		time.Sleep(30 * time.Second)
		stop()
		logs := p2.AgentLogs()
		// Five calls in the same instant: at most one chip a second, so the first (if the relay
		// took it before the others came) and one for the rest, its latest call naming how many
		// more it stands for.
		if len(logs) == 0 || len(logs) > 2 {
			t.Fatalf("%d chips for a burst of 5: %+v", len(logs), logs)
		}
		last := logs[len(logs)-1]
		if want := fmt.Sprintf("🛠 shell(step 5) +%d", 5-len(logs)); last.Summary != want || last.Status != "error" {
			t.Fatalf("last chip of the burst %q (%s), want %q (error)", last.Summary, last.Status, want)
		}
		if s := m.Stats(); s.Chips.Sent != int64(len(logs)) || s.Chips.Coalesced != int64(5-len(logs)) {
			t.Errorf("chip stats %+v", s.Chips)
		}
		if n := len(p2.A2ASends()); n != 1 {
			t.Errorf("the peer got %d replies, want 1", n)
		}
	})
}
