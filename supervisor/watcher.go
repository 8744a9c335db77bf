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
	var reason string
	var cause error
	var log *zap.Logger
	p.st.do(func(t *table) {
		reason, cause, log = sess.reason, sess.cause, sess.log
		t.finish(sess, reason, cause)
	})
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
			p.st.do(func(t *table) { t.retire(sess, WatchdogDead, err) })
			return
		case <-sess.retireCh:
			return
		case <-sess.kick:
			p.settleSpare(sess, false)
		case <-idle.C:
		}
		// Re-arm, or retire when the idle time is up.
		p.st.do(func(t *table) { t.idleCheck(sess, idle) })
	}
}

// idleCheck retires sess when it was idle for Config.IdleTTL, or re-arms the watcher's idle
// timer for what is left; it stops the timer while sess is not idle.
func (t *table) idleCheck(sess *session, idle *time.Timer) {
	if sess.state == StateIdle && t.cfg.IdleTTL > 0 {
		if left := time.Until(sess.lastUsed.Add(t.cfg.IdleTTL)); left > 0 {
			idle.Reset(left)
		} else {
			t.retire(sess, ReasonIdle, nil)
		}
	} else {
		idle.Stop()
	}
}
