package molecule

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/inbox/chat"
	"github.com/molecule-ai/codex-warm/inbox/molecule/platform"
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

// noteAnswer feeds the heartbeat's error_rate and sample_error.
func (m *Inbox) noteAnswer(failed bool, errText string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.winTotal++
	if failed {
		m.winFailed++
		m.lastError = chat.CapText(errText, 256)
	}
}

// sendHeartbeat keeps the workspace online and reports whether the platform accepted it; a
// failure is counted and the next tick tries again.
func (m *Inbox) sendHeartbeat(ctx context.Context) bool {
	hb := m.heartbeatBody()
	err := m.client.Heartbeat(ctx, hb)
	switch {
	case ctx.Err() != nil:
	case err != nil:
		m.c.heartbeatErrors.Add(1)
		m.platformCallFailed(platform.CallHeartbeat, err)
	default:
		m.log.Debug("heartbeat sent", zap.Int("active_tasks", hb.ActiveTasks))
		m.platformCallOK(platform.CallHeartbeat)
	}
	return err == nil
}

// heartbeatBody reports the running turns and the failure rate since the previous heartbeat.
func (m *Inbox) heartbeatBody() platform.HeartbeatBody {
	// Asked before taking m.mu: the supervisor takes its own lock.
	var acts []supervisor.ChatActivity
	if m.cfg.Progress != nil {
		acts = m.cfg.Progress.Activity()
	}
	runtime, why := m.runtimeState()
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	hb := platform.HeartbeatBody{
		ActiveTasks:   max(len(m.inflight), len(acts)),
		UptimeSeconds: int64(time.Since(m.runStart) / time.Second),
		IsBusy:        len(m.inflight) > 0 || len(acts) > 0,
		RuntimeState:  runtime,
	}
	if len(acts) > 0 {
		hb.CurrentTask = currentTask(m.red, acts, now)
	} else {
		for _, key := range m.inflight {
			if hb.CurrentTask == "" || key < hb.CurrentTask {
				hb.CurrentTask = key
			}
		}
		if hb.CurrentTask != "" {
			hb.CurrentTask = "answering " + hb.CurrentTask
		}
	}
	if m.winTotal > 0 {
		hb.ErrorRate = float64(m.winFailed) / float64(m.winTotal)
	}
	if m.winFailed > 0 {
		hb.SampleError = m.lastError
	}
	if hb.SampleError == "" {
		hb.SampleError = why // the canvas shows it on the degraded card
	}
	m.winTotal, m.winFailed, m.lastError = 0, 0, ""
	return hb
}
