package molecule

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/inbox/chat"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// What the heartbeat tells the platform about the runtime besides the failure rate: is_busy (a
// message is being answered) and runtime_state "wedged" (codex children crash-loop). The platform
// shows a workspace degraded when error_rate >= 0.5 or runtime_state is "wedged", and online again
// once error_rate < 0.1 and runtime_state is empty (handlers/registry.go, Heartbeat).

// RuntimeHealth tells the heartbeat how codex children fare; *supervisor.Supervisor is one.
type RuntimeHealth interface {
	Crashes() supervisor.CrashStreak
}

// DefaultWedgedAfter is how many codex children must crash (fail to start, or die before
// completing a turn) with no turn completed since, anywhere in the pool, before the heartbeat
// reports runtime_state "wedged". Three is past a single unlucky crash and a retry of it, and the
// supervisor's crash backoff (1 s, 2 s, 4 s, … by default) reaches it within seconds of a broken
// codex. A completed turn clears it.
const DefaultWedgedAfter = 3

// runtimeWedged is the heartbeat's runtime_state for a runtime that cannot answer.
const runtimeWedged = "wedged"

// runtimeState is the heartbeat's runtime_state ("" or runtimeWedged) and, when wedged, why. It
// logs when the state changes: one line when it starts, one when it ends.
func (m *Inbox) runtimeState() (state, why string) {
	if m.cfg.Health == nil {
		return "", ""
	}
	streak := m.cfg.Health.Crashes()
	if streak.Crashes >= m.cfg.WedgedAfter {
		state = runtimeWedged
		why = chat.CapText(fmt.Sprintf("codex keeps crashing: %d children crashed since a turn last completed; last: %s",
			streak.Crashes, streak.Last), 256)
	}
	m.mu.Lock()
	was := m.lastRuntime
	m.lastRuntime = state
	m.mu.Unlock()
	switch {
	case state == was:
	case state == runtimeWedged:
		m.log.Error("heartbeat reports the runtime wedged (the platform shows the workspace degraded) until a turn completes",
			zap.Int("crashes", streak.Crashes), zap.String("last_crash", streak.Last))
	default:
		m.log.Info("a turn completed; heartbeat no longer reports the runtime wedged")
	}
	return state, why
}
