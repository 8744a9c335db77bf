package supervisor

import (
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
)

// watch is the child's watcher: it retires the child when it dies or idles too long, and when
// the child is retiring for any reason closes and reaps it.
func (s *Supervisor) watch(sess *session) {
	defer s.wg.Done()
	s.watchUntilRetiring(sess)
	s.dropUnusedSpareThread(sess, true)
	err := sess.child.Close()
	s.mu.Lock()
	reason, cause, log := sess.reason, sess.cause, sess.log
	s.finishLocked(sess, reason, cause)
	s.mu.Unlock()
	s.persistRecords()
	log.Info("codex child retired", zap.String("reason", reason), zap.NamedError("cause", cause),
		zap.NamedError("close_error", err))
}

func (s *Supervisor) watchUntilRetiring(sess *session) {
	idle := time.NewTimer(time.Hour)
	idle.Stop()
	defer idle.Stop()
	for {
		select {
		case <-sess.child.Done():
			err := sess.child.Err()
			if err == nil {
				err = appserver.ErrChildExited
			}
			s.mu.Lock()
			s.retireLocked(sess, WatchdogDead, err)
			s.mu.Unlock()
			return
		case <-sess.retireCh:
			return
		case <-sess.kick:
			s.dropUnusedSpareThread(sess, false)
		case <-idle.C:
		}
		// Re-arm, or retire when the idle time is up.
		s.mu.Lock()
		if sess.state == StateIdle && s.cfg.IdleTTL > 0 {
			if left := time.Until(sess.lastUsed.Add(s.cfg.IdleTTL)); left > 0 {
				idle.Reset(left)
			} else {
				s.retireLocked(sess, ReasonIdle, nil)
			}
		} else {
			idle.Stop()
		}
		s.mu.Unlock()
	}
}
