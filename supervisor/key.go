package supervisor

import "context"

// keyState is the per chat key bookkeeping. It lives while the key has work, a child, or a
// pending crash backoff.
type keyState struct {
	key  string
	sess *session

	restarts    int  // children started after a watchdog retirement or failed start
	needRestart bool // the next spawn is a restart

	crash crashBackoff

	// running is the job the key's worker runs now and stopRun ends it (cause ErrStopped);
	// both nil between jobs. lastErr is the error of the key's last message, "" after a success.
	running *job
	stopRun context.CancelCauseFunc
	// live is the key's running turn, which a message can be steered into (BusySteer); nil
	// between turns.
	live    *liveTurn
	lastErr string
}

// gcKeyLocked forgets a key with no work, no child, no pending backoff and no restart to count.
// A key whose child a watchdog retired is kept (a few hundred bytes) so that its next child
// reports the restart.
func (s *Supervisor) gcKeyLocked(k *keyState) {
	if !s.queue.BusyLocked(k.key) && k.sess == nil && !k.crash.pending() && !k.needRestart &&
		s.keys[k.key] == k {
		delete(s.keys, k.key)
	}
}
