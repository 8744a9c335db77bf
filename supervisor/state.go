package supervisor

import (
	"fmt"
	"time"

	"github.com/molecule-ai/codex-warm/supervisor/hosts"
	"go.uber.org/zap"
)

// Reasons a child was retired besides the watchdog names; keys of Totals.Retired.
const (
	// ReasonIdle: the child was idle for Config.IdleTTL.
	ReasonIdle = "idle"
	// ReasonEvicted: the least recently used idle child made room for another chat key.
	ReasonEvicted = "evicted"
	// ReasonShutdown: the supervisor shut down.
	ReasonShutdown = "shutdown"
	// ReasonStartFailed: spawn or thread start/resume failed (other than a handshake timeout).
	ReasonStartFailed = "start_failed"
	// ReasonProtocol: a turn ended because the child's answer could not be read. Codex may still
	// be running that turn and would merge the next turn/start into it, so the child is not
	// trusted with another turn.
	ReasonProtocol = "protocol_error"

	// Recycling: a healthy child replaced by a fresh one that resumes its thread. Each has its
	// own reason so Totals.Retired tells a leak (memory) from routine renewal.

	// ReasonMemory: the child's private memory passed Config.ChildMemoryLimit.
	ReasonMemory = "memory"
	// ReasonMaxAge: the child was older than Config.ChildMaxAge.
	ReasonMaxAge = "max_age"
	// ReasonMaxTurns: the child ran Config.ChildMaxTurns turns.
	ReasonMaxTurns = "max_turns"

	// Shared children (Config.ThreadsPerChild > 1).

	// ReasonHostDrain: the chat's thread left a shared child that stopped taking threads
	// (recycled, or holding a wedged thread); its next message resumes it elsewhere.
	ReasonHostDrain = "host_drain"
	// ReasonHostWedged: a shared child drains because one of its threads cannot leave it (its
	// turn ignored turn/interrupt, or codex did not unload it).
	ReasonHostWedged = hosts.ReasonWedged
)

// transitions is the lifecycle table. starting → retiring exists besides the issue's
// starting → dead because a child can be up while its thread start/resume fails: it must be
// closed and reaped, which is what retiring means. starting → dead is the spawn that never
// produced a process.
//
// A spare goes starting → spare once its thread is started, and spare → starting when a chat
// takes it and opens its own thread on it.
var transitions = map[State][]State{
	StateStarting: {StateIdle, StateSpare, StateRetiring, StateDead},
	StateSpare:    {StateStarting, StateRetiring},
	StateIdle:     {StateBusy, StateRetiring},
	StateBusy:     {StateIdle, StateRetiring},
	StateRetiring: {StateDead},
	StateDead:     nil,
}

// checkTransition reports whether from → to is a lifecycle transition. An invalid one is a
// programming error in the supervisor; callers log it and keep the current state.
func checkTransition(from, to State) error {
	for _, s := range transitions[from] {
		if s == to {
			return nil
		}
	}
	return fmt.Errorf("supervisor: invalid child state transition %s → %s", from, to)
}

// setState moves sess to state to. An invalid transition is a bug; it is logged and the
// state kept.
func (t *table) setState(sess *session, to State) bool {
	if err := checkTransition(sess.state, to); err != nil {
		t.log.DPanic("invalid child state transition", zap.String("chat_key", sess.key.key),
			zap.Int("pid", sess.pid), zap.Error(err))
		return false
	}
	t.slots.Moved(sess.state == StateRetiring, to == StateRetiring)
	sess.state = to
	t.freeze.notify()
	return true
}

// retire starts retiring sess: its watcher closes and reaps the child. Idempotent; the
// first reason wins.
func (t *table) retire(sess *session, reason string, cause error) {
	if sess.state == StateRetiring || sess.state == StateDead {
		return
	}
	// Read before the state changes: whether the chat's work ran when its child died.
	sess.busyAtDeath = sess.state == StateBusy || sess.state == StateStarting
	if !t.setState(sess, StateRetiring) {
		return
	}
	sess.reason, sess.cause = reason, cause
	close(sess.retireCh)
}

// finish marks sess dead after its child was reaped (or never started), frees its slot and
// does the crash accounting.
func (t *table) finish(sess *session, reason string, cause error) {
	if !t.setState(sess, StateDead) {
		sess.state = StateDead // logged as a bug; keep the books straight anyway
	}
	delete(t.sessions, sess)
	t.retired[reason]++
	k := sess.key
	if k.sess == sess {
		k.sess = nil
	}
	crash := !t.closed && isCrash(reason, sess.ready, sess.completed, time.Since(sess.started), t.cfg.CrashWindow)
	if sess.host != nil && reason == WatchdogDead && sess.ready && !sess.busyAtDeath {
		// A shared child died under this chat while its thread was idle: a neighbour's turn
		// did it, not this chat's.
		crash = false
	}
	if crash {
		t.streak.crashed(cause, time.Now())
	}
	switch {
	case sess.spare:
		t.notifySpares()
		if crash {
			d, n := t.spares.crashed(t.cfg.CrashBackoffInitial, t.cfg.CrashBackoffMax, cause, time.Now())
			t.crashBackoffs++
			t.log.Warn("spare codex child crashed; backing off", zap.Int("failures", n),
				zap.Duration("retry_in", d), zap.Error(cause))
		}
	case reason == ReasonIdle, reason == ReasonEvicted, reason == ReasonShutdown, reason == ReasonReset,
		reason == ReasonMemory, reason == ReasonMaxAge, reason == ReasonMaxTurns, reason == ReasonHostDrain:
	default:
		k.needRestart = true
	}
	if crash && !sess.spare {
		t.recordFailure(k, cause)
	}
	t.releaseSlot()
	t.kickSpares()
	close(sess.reaped)
	t.gcKey(k)
}

// turnEnded counts a turn sess ran; completed: it reached turn/completed without error,
// which ends the crash backoff of its chat (and of the spares, when the child was one) and the
// pool's crash streak.
func (t *table) turnEnded(sess *session, completed bool) {
	sess.turns++
	t.turns++
	if sess.host != nil {
		sess.host.AddTurn()
	}
	if !completed {
		return
	}
	sess.completed++
	sess.key.crash.reset()
	t.streak.completed()
	if sess.fromSpare {
		t.spares.healthy() // spares make healthy children
	}
}

// idle returns a busy session to idle: it becomes the most recently used, its watcher
// re-arms the idle timer, and a slot waiter may now evict it.
func (t *table) idle(sess *session) {
	t.setState(sess, StateIdle)
	sess.lastUsed = time.Now()
	t.useSeq++
	sess.useSeq = t.useSeq
	select {
	case sess.kick <- struct{}{}:
	default:
	}
	t.serveWaiters()
}
