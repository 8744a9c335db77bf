package molecule

import (
	"sync"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/molecule/ledger"
	"go.uber.org/zap"
)

// stateWrites remembers whether the state file's last write failed, so that a full disk is one
// error line when writes start failing and one info line when a write succeeds again, rather
// than an error line per poll (every poll retries a failed write) for as long as it lasts.
// Every failed write is still counted (Stats.PersistErrors, the metrics).
type stateWrites struct {
	mu       sync.Mutex
	failing  bool
	since    time.Time
	failures int
}

// failed records a failed write and reports whether writes were succeeding until now.
func (w *stateWrites) failed(now time.Time) (begins bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	begins = !w.failing
	if begins {
		w.failing, w.since, w.failures = true, now, 0
	}
	w.failures++
	return begins
}

// succeeded records a successful write (or nothing left to write) and reports whether it ends a
// stretch of failures, with its length and how many writes failed in it.
func (w *stateWrites) succeeded(now time.Time) (ends bool, lasted time.Duration, failures int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.failing {
		return false, 0, 0
	}
	w.failing = false
	return true, now.Sub(w.since), w.failures
}

// stateWriter writes the ledger's state file for every part.
type stateWriter struct {
	ledger *ledger.Ledger
	c      *counters
	writes stateWrites
}

func newStateWriter(l *ledger.Ledger, c *counters) *stateWriter { return &stateWriter{ledger: l, c: c} }

// persist writes the state file if something changed (sync: a failure is counted, and logged
// once until a write succeeds; the next write retries).
func (s *stateWriter) persist(log *zap.Logger) { s.sync(log, "recording the inbox position") }

// sync writes the state file if something changed. A failure is counted and logged at
// error level when writes start failing (what names the write that failed first), at debug
// after that; the value stays in memory and the next sync writes it. The first write that
// succeeds again is logged at info.
func (s *stateWriter) sync(log *zap.Logger, what string) {
	err := s.ledger.Sync()
	now := time.Now()
	if err == nil {
		if ends, lasted, failures := s.writes.succeeded(now); ends {
			log.Info("state file written again", zap.Duration("failing_for", lasted), zap.Int("failed_writes", failures))
		}
		return
	}
	s.c.persistErrors.Add(1)
	if s.writes.failed(now) {
		log.Error("could not write the state file; kept in memory and written on the next success, logged again once a write succeeds",
			zap.String("while", what), zap.Error(err))
		return
	}
	log.Debug("could not write the state file", zap.String("while", what), zap.Error(err))
}
