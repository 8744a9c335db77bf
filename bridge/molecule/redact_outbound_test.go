package molecule

import (
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

// A running command that names the workspace token (codex may have read it) is redacted in the
// heartbeat's current_task, as it is in replies, prompts and progress notes: every text the
// daemon sends the platform goes through the one redactor. The token sits across the 256-byte
// cut, so a redaction after the cut would leave its head.
func TestHeartbeatCurrentTaskRedacted(t *testing.T) {
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	token := p.Token()
	g := chattest.NewGate()
	a := chattest.GatedAnswerer(g)
	log, _ := newTestLogger(t)
	cfg := testConfig(p, t.TempDir(), a, log)
	cfg.HeartbeatInterval = 10 * cfg.PollInterval
	// The first (longest-running) step names the token whole; the second starts it before the
	// cut and ends after it.
	first := `peer:peer-5: running "echo ` + token + `" (2m0s); `
	pad := strings.Repeat("x", maxCurrentTask-len(first)-len(`canvas:ws: running "curl -H `)-len(token)/2)
	cfg.Progress = fakeProgress{
		{ChatKey: "peer:peer-5", What: `running "echo ` + token + `"`, Since: time.Now().Add(-2 * time.Minute)},
		{ChatKey: "canvas:ws", What: `running "curl -H ` + pad + token + `"`, Since: time.Now()},
	}
	start(t, cfg)
	defer g.Open()

	p.Enqueue(moleculetest.PeerMessage("peer-5", "slow"))
	ctx := waitCtx(t)
	must(t, a.WaitFor(ctx, func() bool { return len(a.Calls()) == 1 }))
	must(t, p.WaitFor(ctx, func() bool {
		for _, hb := range p.Heartbeats() {
			if task, _ := hb["current_task"].(string); strings.HasPrefix(task, "peer:peer-5: running") {
				return true
			}
		}
		return false
	}))
	for _, hb := range p.Heartbeats() {
		task, _ := hb["current_task"].(string)
		if strings.Contains(task, token[:6]) {
			t.Fatalf("heartbeat current_task carries the token: %q", task)
		}
	}
}
