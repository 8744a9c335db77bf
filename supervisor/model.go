package supervisor

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
)

// ModelStatus is whether the model could be reached, as the turns found it.
type ModelStatus struct {
	// Unreachable is true from a turn ended by WatchdogModelUnreachable until a turn completes.
	// (The zero value, reachable, is what the daemon assumes until a turn finds otherwise.)
	Unreachable bool `json:"unreachable"`
	// Since is when the current state began (zero: reachable since the start).
	Since time.Time `json:"since,omitzero"`
	// Cause is codex's account of the outage ("Connection failed: …"), while unreachable.
	Cause string `json:"cause,omitempty"`
	// Outages counts the times the model became unreachable.
	Outages int `json:"outages"`
}

// modelState follows the model's reachability across turns. It has two states: reachable, and
// unreachable (from a turn ended by WatchdogModelUnreachable until any turn completes). It is
// the only part of the supervisor that is not per chat, so it has its own lock.
type modelState struct {
	mu sync.Mutex
	st ModelStatus
}

func newModelState() *modelState { return &modelState{} }

func (m *modelState) status() ModelStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st
}

// watchFor is the ModelUnreachable bound a new turn gets: the configured one while the model is
// reachable; 0 while it is not (the turn ends at codex's first report, so every message of an
// outage is answered at once, and the first one that reaches the model ends the outage).
func (m *modelState) watchFor(configured time.Duration) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	if configured >= 0 && m.st.Unreachable {
		return 0
	}
	return configured
}

// unreachable records a turn ended by WatchdogModelUnreachable; the first one of an outage is
// logged at warn, the others are not.
func (m *modelState) unreachable(cause string, log *zap.Logger) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.st.Cause = cause
	if m.st.Unreachable {
		return
	}
	m.st.Unreachable, m.st.Since = true, time.Now()
	m.st.Outages++
	log.Warn("the model cannot be reached: turns end at codex's first report of it and chats are told so, until a turn gets through",
		zap.String("cause", cause))
}

// reached records a turn the model answered; it ends an outage.
func (m *modelState) reached(log *zap.Logger) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.st.Unreachable {
		return
	}
	log.Info("the model can be reached again", zap.Duration("outage", time.Since(m.st.Since).Round(time.Second)),
		zap.String("last_cause", m.st.Cause))
	m.st.Unreachable, m.st.Since, m.st.Cause = false, time.Now(), ""
}

// Model is whether the model could be reached, as the turns found it; cheap (no /proc reads),
// for readiness probes.
func (s *Supervisor) Model() ModelStatus { return s.model.status() }

// dropUnanswered reverts a turn the model never saw from the thread (it holds only the user's
// message): the message is answered later by a turn of its own, and each try of an outage would
// otherwise leave the same message in the history once more. A failure is logged; the history
// then shows the message twice, which is all it costs.
func (s *Supervisor) dropUnanswered(sess *session, turnID string) {
	ctx, cancel := context.WithTimeout(s.life, 10*time.Second)
	defer cancel()
	if err := sess.child.RevertThread(ctx, sess.threadID, turnID); err != nil {
		sess.log.Warn("could not drop the unanswered turn from the thread", zap.String("turn_id", turnID), zap.Error(err))
	}
}
