package supervisor

import (
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
)

// watch is the child's watcher: it retires the child when it dies or idles too long, and when
// the child is retiring for any reason closes and reaps it.
func (p *pool) watch(sess *session) {
	defer p.wg.Done()
	p.watchUntilRetiring(sess)
	p.settleSpare(sess, true)
	err := sess.child.Close()
	p.mu.Lock()
	reason, cause, log := sess.reason, sess.cause, sess.log
	p.finishLocked(sess, reason, cause)
	p.mu.Unlock()
	p.persistRecords()
	log.Info("codex child retired", zap.String("reason", reason), zap.NamedError("cause", cause),
		zap.NamedError("close_error", err))
}

func (p *pool) watchUntilRetiring(sess *session) {
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
			p.mu.Lock()
			p.retireLocked(sess, WatchdogDead, err)
			p.mu.Unlock()
			return
		case <-sess.retireCh:
			return
		case <-sess.kick:
			p.settleSpare(sess, false)
		case <-idle.C:
		}
		// Re-arm, or retire when the idle time is up.
		p.mu.Lock()
		if sess.state == StateIdle && p.cfg.IdleTTL > 0 {
			if left := time.Until(sess.lastUsed.Add(p.cfg.IdleTTL)); left > 0 {
				idle.Reset(left)
			} else {
				p.retireLocked(sess, ReasonIdle, nil)
			}
		} else {
			idle.Stop()
		}
		p.mu.Unlock()
	}
}
