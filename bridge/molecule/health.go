package molecule

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/bridge/chat"
	"github.com/molecule-ai/codex-warm/bridge/molecule/platform"
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
func (w *workspace) runtimeState() (state, why string) {
	if w.cfg.Health == nil {
		return "", ""
	}
	streak := w.cfg.Health.Crashes()
	if streak.Crashes >= w.cfg.WedgedAfter {
		state = runtimeWedged
		why = chat.CapText(fmt.Sprintf("codex keeps crashing: %d children crashed since a turn last completed; last: %s",
			streak.Crashes, streak.Last), 256)
	}
	w.mu.Lock()
	was := w.lastRuntime
	w.lastRuntime = state
	w.mu.Unlock()
	switch {
	case state == was:
	case state == runtimeWedged:
		w.log.Error("heartbeat reports the runtime wedged (the platform shows the workspace degraded) until a turn completes",
			zap.Int("crashes", streak.Crashes), zap.String("last_crash", streak.Last))
	default:
		w.log.Info("a turn completed; heartbeat no longer reports the runtime wedged")
	}
	return state, why
}

// answerWindow counts answers and failures between two heartbeats, for the heartbeat's
// error_rate and sample_error. The answerer and delivery note; the workspace takes.
type answerWindow struct {
	mu        sync.Mutex
	total     int    // answers since the last heartbeat
	failed    int    // failures since the last heartbeat
	lastError string // a failure since the last heartbeat, for sample_error
}

// note counts one answer, failed or not.
func (a *answerWindow) note(failed bool, errText string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.total++
	if failed {
		a.failed++
		a.lastError = chat.CapText(errText, 256)
	}
}

// take returns the failure rate and a failure of the window, and starts the next one.
func (a *answerWindow) take() (rate float64, sample string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.total > 0 {
		rate = float64(a.failed) / float64(a.total)
	}
	if a.failed > 0 {
		sample = a.lastError
	}
	a.total, a.failed, a.lastError = 0, 0, ""
	return rate, sample
}

// sendHeartbeat keeps the workspace online and reports whether the platform accepted it; a
// failure is counted and the next tick tries again.
func (w *workspace) sendHeartbeat(ctx context.Context) bool {
	hb := w.heartbeatBody()
	err := w.client.Heartbeat(ctx, hb)
	switch {
	case ctx.Err() != nil:
	case err != nil && platform.IsRateLimited(err):
		// An answer, not an outage: the rate gate holds the next call until the window refills.
		w.c.heartbeatErrors.Add(1)
		w.log.Debug("heartbeat refused by the rate limit (HTTP 429)", zap.Error(err))
	case err != nil:
		w.c.heartbeatErrors.Add(1)
		w.outages.failed(platform.CallHeartbeat, err)
	default:
		w.log.Debug("heartbeat sent", zap.Int("active_tasks", hb.ActiveTasks))
		w.outages.ok(platform.CallHeartbeat)
	}
	return err == nil
}

// heartbeatBody reports the running turns and the failure rate since the previous heartbeat.
func (w *workspace) heartbeatBody() platform.HeartbeatBody {
	// Asked before any lock of the inbox: the supervisor takes its own lock.
	var acts []supervisor.ChatActivity
	if w.cfg.Progress != nil {
		acts = w.cfg.Progress.Activity()
	}
	runtime, why := w.runtimeState()
	now := time.Now()
	inflight, first := w.busy()
	w.mu.Lock()
	start := w.runStart
	w.mu.Unlock()
	hb := platform.HeartbeatBody{
		ActiveTasks:   max(inflight, len(acts)),
		UptimeSeconds: int64(time.Since(start) / time.Second),
		IsBusy:        inflight > 0 || len(acts) > 0,
		RuntimeState:  runtime,
	}
	if len(acts) > 0 {
		hb.CurrentTask = currentTask(w.red, acts, now)
	} else if first != "" {
		hb.CurrentTask = "answering " + first
	}
	hb.ErrorRate, hb.SampleError = w.window.take()
	if hb.SampleError == "" {
		hb.SampleError = why // the canvas shows it on the degraded card
	}
	if task, sample := w.refusal.heartbeat(); task != "" {
		// Nothing is answered: the canvas shows the workspace degraded, and why.
		hb.ErrorRate, hb.SampleError = 1, sample
		if len(acts) == 0 {
			hb.CurrentTask = task
		}
	}
	return hb
}
