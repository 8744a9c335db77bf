package molecule

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// fakeHealth is a RuntimeHealth whose crash streak the test sets.
type fakeHealth struct {
	mu     sync.Mutex
	streak supervisor.CrashStreak
}

func (f *fakeHealth) Crashes() supervisor.CrashStreak {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.streak
}

func (f *fakeHealth) set(s supervisor.CrashStreak) {
	f.mu.Lock()
	f.streak = s
	f.mu.Unlock()
}

// lastHeartbeatHas is a WaitFor condition: the newest heartbeat the platform recorded passes f.
func lastHeartbeatHas(p *moleculetest.Platform, f func(map[string]any) bool) func() bool {
	return func() bool {
		hbs := p.Heartbeats()
		return len(hbs) > 0 && f(hbs[len(hbs)-1])
	}
}

// The heartbeat says is_busy while a message is answered, and runtime_state "wedged" (with the
// cause as sample_error) while codex children crash-loop; both clear, and the platform shows the
// workspace degraded and online again as its heartbeat handler does.
func TestHeartbeatReportsBusyAndWedged(t *testing.T) {
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	log, _ := newTestLogger(t)
	gate := chattest.NewGate()
	cfg := testConfig(p, t.TempDir(), chattest.GatedAnswerer(gate), log)
	health := &fakeHealth{}
	cfg.Health = health
	cfg.HeartbeatInterval = 5 * time.Millisecond
	start(t, cfg)
	ctx := waitCtx(t)

	must(t, p.WaitFor(ctx, lastHeartbeatHas(p, func(hb map[string]any) bool {
		return hb["is_busy"] == false && hb["runtime_state"] == ""
	})))
	p.Enqueue(moleculetest.CanvasMessage("hold me"))
	must(t, p.WaitFor(ctx, lastHeartbeatHas(p, func(hb map[string]any) bool { return hb["is_busy"] == true })))
	gate.Open()
	must(t, p.WaitFor(ctx, func() bool { return len(p.Notifies()) == 1 }))
	must(t, p.WaitFor(ctx, lastHeartbeatHas(p, func(hb map[string]any) bool { return hb["is_busy"] == false })))

	health.set(supervisor.CrashStreak{Crashes: 2, Last: "exec: codex exited at once", LastAt: time.Now()})
	n := len(p.Heartbeats())
	must(t, p.WaitFor(ctx, func() bool { return len(p.Heartbeats()) >= n+3 }))
	for _, hb := range p.Heartbeats()[n+1:] {
		if hb["runtime_state"] != "" {
			t.Fatalf("heartbeat %v after 2 crashes: want runtime_state empty (3 make a loop)", hb)
		}
	}
	health.set(supervisor.CrashStreak{Crashes: 3, Last: "exec: codex exited at once", LastAt: time.Now()})
	must(t, p.WaitFor(ctx, lastHeartbeatHas(p, func(hb map[string]any) bool { return hb["runtime_state"] == "wedged" })))
	hbs := p.Heartbeats()
	if s, _ := hbs[len(hbs)-1]["sample_error"].(string); !strings.Contains(s, "3 children crashed") || !strings.Contains(s, "exited at once") {
		t.Errorf("sample_error of a wedged heartbeat = %q, want the crash count and the last cause", s)
	}
	must(t, p.WaitFor(ctx, func() bool { return p.WorkspaceStatus() == "degraded" }))
	health.set(supervisor.CrashStreak{})
	must(t, p.WaitFor(ctx, lastHeartbeatHas(p, func(hb map[string]any) bool { return hb["runtime_state"] == "" })))
	must(t, p.WaitFor(ctx, func() bool { return p.WorkspaceStatus() == "online" }))
	for _, hb := range hbs {
		if hb["runtime_state"] == "wedged" && hb["is_busy"] == true {
			t.Errorf("heartbeat %v: busy while nothing ran", hb)
		}
	}
}
