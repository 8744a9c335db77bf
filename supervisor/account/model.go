package account

import (
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

// Model follows the model's reachability across turns. It has two states: reachable, and
// unreachable (from a turn ended by WatchdogModelUnreachable until any turn completes). It is
// the only part of the supervisor that is not per chat, so it has its own lock.
type Model struct {
	mu sync.Mutex
	st ModelStatus
}

func NewModel() *Model { return &Model{} }

func (m *Model) Status() ModelStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st
}

// watchFor is the ModelUnreachable bound a new turn gets: the configured one while the model is
// reachable; 0 while it is not (the turn ends at codex's first report, so every message of an
// outage is answered at once, and the first one that reaches the model ends the outage).
func (m *Model) WatchFor(configured time.Duration) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	if configured >= 0 && m.st.Unreachable {
		return 0
	}
	return configured
}

// unreachable records a turn ended by WatchdogModelUnreachable; the first one of an outage is
// logged at warn, the others are not.
func (m *Model) Unreachable(cause string, log *zap.Logger) {
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
func (m *Model) Reached(log *zap.Logger) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.st.Unreachable {
		return
	}
	log.Info("the model can be reached again", zap.Duration("outage", time.Since(m.st.Since).Round(time.Second)),
		zap.String("last_cause", m.st.Cause))
	m.st.Unreachable, m.st.Since, m.st.Cause = false, time.Now(), ""
}
