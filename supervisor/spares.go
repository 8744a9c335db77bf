package supervisor

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// Spare children (Config.Spares) are spawned, initialized and hold a thread started in advance,
// bound to no chat key. A chat key that needs a child takes one, so its first message costs only
// a thread/resume (or nothing, for a chat with no stored thread) before the turn, instead of a
// spawn and an initialize. A spare holds a slot like any child, is the first eviction victim
// under pressure and is never handed to two chats: the hand-out is one transition, spare →
// starting, under Supervisor.mu.
//
// One goroutine, keepSpares, starts spares one at a time whenever a slot is free that nobody
// waits for; Shutdown waits for it before closing the children. A spare that fails to start, or
// dies young, backs the keeper off like a chat's crashing child (spares.crash).

// spareReplaceDelay bounds how long a taken spare's replacement (no shared children) waits for the
// chat's first turn, which a codex start beside it would slow (docs/benchmarks.md).
const spareReplaceDelay = time.Second

// spareState is the spares' machinery beside the pool's: the keeper's wake-up, the signal for
// chats that wait for a spare, and the spares' own restart backoff.
type spareState struct {
	kick    chan struct{} // wakes keepSpares
	changed chan struct{} // closed and replaced when a spare becomes ready or ends; guarded by Supervisor.mu
	done    chan struct{} // closed when keepSpares returned, or at once with no spares
	crash   crashBackoff  // the spares' own restart backoff; guarded by Supervisor.mu
}

func newSpareState() spareState {
	return spareState{kick: make(chan struct{}, 1), changed: make(chan struct{}), done: make(chan struct{})}
}

// crashed counts a spare's crash with cause and returns the backoff before the next spare and
// the crashes in a row.
func (sp *spareState) crashed(initial, maxInterval time.Duration, cause error, now time.Time) (time.Duration, int) {
	d := sp.crash.record(initial, maxInterval, cause, now)
	return d, sp.crash.count()
}

// healthy forgets the spares' crashes: a chat's turn completed on a child that was a spare.
func (sp *spareState) healthy() { sp.crash.reset() }

// startSpares starts the spare keeper when Config.Spares asks for spares.
func (p *pool) startSpares() {
	if p.cfg.Spares == 0 {
		close(p.spares.done)
		return
	}
	go p.keepSpares() // Shutdown waits for it (sparesStopped)
	p.kickSpares()
}

// sparesStopped is closed once the spare keeper returned: no spare starts after it.
func (p *pool) sparesStopped() <-chan struct{} { return p.spares.done }

// notifySparesLocked wakes chats waiting for a starting spare: one became ready or ended.
func (p *pool) notifySparesLocked() {
	close(p.spares.changed)
	p.spares.changed = make(chan struct{})
}

// startingSpare returns a channel closed when the next spare becomes ready or ends, or nil when a
// chat should not wait for one: a slot is free now, or no spare is starting. A spare that is
// starting holds a slot; without this wait a chat at the cap would evict a warm idle child while
// the spare it could take is a moment from ready.
func (p *pool) startingSpare() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.slots.free(p.memUseLocked()) {
		return nil
	}
	for sess := range p.sessions {
		if sess.spare && sess.state == StateStarting {
			return p.spares.changed
		}
	}
	return nil
}

// kickSpares wakes the spare keeper: a spare was taken or a slot freed.
func (p *pool) kickSpares() {
	select {
	case p.spares.kick <- struct{}{}:
	default:
	}
}

// keepSpares is the spare keeper's loop. It returns when the supervisor stops accepting work.
func (p *pool) keepSpares() {
	defer close(p.spares.done)
	for {
		select {
		case <-p.accepting.Done():
			return
		case <-p.spares.kick:
		}
		for {
			sess, wait := p.reserveSpare()
			if wait > 0 {
				t := time.NewTimer(wait) // a kick (a taken spare's first turn is over) cuts it short
				select {
				case <-t.C:
				case <-p.spares.kick:
				case <-p.accepting.Done():
				}
				if t.Stop(); p.accepting.Err() != nil {
					return
				}
				continue
			}
			if sess == nil {
				break
			}
			p.startSpare(sess)
		}
	}
}

// reserveSpare takes a slot for a new spare and registers it in StateStarting, or returns nil
// when no spare is wanted now: enough spares, no free slot, someone waits for a slot, or the
// keeper is backing off or waits for a taken spare's first turn (then wait > 0).
func (p *pool) reserveSpare() (*session, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.handover.active() || p.sparesLocked() >= p.cfg.Spares {
		return nil, 0
	}
	if wait := p.spares.crash.wait(time.Now()); wait > 0 {
		return nil, wait
	}
	for sess := range p.sessions { // a taken spare's first turn (settleSpare)
		if wait := time.Until(sess.replaceAfter); wait > 0 && p.hosts == nil && sess.state != StateRetiring {
			return nil, wait
		}
	}
	if !p.slots.take(p.memUseLocked()) {
		return nil, 0
	}
	// The placeholder key is in no map: a spare belongs to no chat until one takes it.
	sess := p.newSessionLocked(&keyState{}, p.log.With(zap.Bool("spare", true)))
	sess.spare = true
	return sess, 0
}

// sparesLocked counts spares, ready or starting.
func (p *pool) sparesLocked() int {
	n := 0
	for sess := range p.sessions {
		if sess.spare {
			n++
		}
	}
	return n
}

// startSpare spawns the reserved spare and starts its thread. On failure the spare is retired
// and its end counted by finishLocked.
func (p *pool) startSpare(sess *session) {
	if err := p.spawnInto(sess); err != nil {
		return
	}
	ctx, cancel := context.WithTimeoutCause(p.accepting, p.cfg.HandshakeTimeout, handshakeCause(p.cfg.HandshakeTimeout))
	id, err := sess.child.StartThread(ctx, p.cfg.Thread)
	cancel()
	warmed := false
	if err == nil {
		warmed, err = p.warmSpare(sess, id)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case err != nil:
		sess.log.Warn("spare codex child could not start a thread or was left wedged by its warm-up", zap.Error(err))
		p.retireLocked(sess, ReasonStartFailed, err)
	case sess.state != StateStarting:
		// The watcher saw it die.
	default:
		sess.spareThread, sess.threadID = id, id // the table shows it
		sess.spareWarmed = warmed
		sess.ready = true
		p.setStateLocked(sess, StateSpare)
		p.notifySparesLocked()
		sess.log.Info("spare codex child ready", zap.String("thread_id", id))
		// Someone began waiting for a slot while the spare started: it is the first to go.
		p.rebalanceLocked()
	}
}

// takeSpare hands a ready spare to k, in StateStarting, or returns nil when none is ready.
func (p *pool) takeSpare(k *keyState) *session {
	p.mu.Lock()
	var sess *session
	for c := range p.sessions {
		if c.state == StateSpare {
			sess = c
			break
		}
	}
	if sess == nil || p.closed || p.hosts != nil && ownChildLocked(k) {
		p.mu.Unlock()
		return nil
	}
	p.countRestartLocked(k)
	p.setStateLocked(sess, StateStarting)
	sess.key, k.sess = k, sess
	sess.spare, sess.fromSpare = false, true
	sess.restarts = k.restarts
	sess.started = time.Now()                               // the crash window counts from the hand-out
	sess.replaceAfter = sess.started.Add(spareReplaceDelay) // the kick below times the wait
	sess.log = p.log.With(zap.String("chat_key", k.key), zap.Int("pid", sess.pid))
	child := sess.child
	p.mu.Unlock()
	// The child's own lines (its codex client, its process) name the chat from now on, too.
	if r, ok := child.(logRelabeler); ok {
		r.SetLogger(childLogger(p.cfg.AppServer.Logger, p.cfg.Logger, k.key))
	}
	p.kickSpares()
	return sess
}

// countRestartLocked counts the key's next child as a restart when a watchdog or failure ended
// the last one.
func (p *pool) countRestartLocked(k *keyState) {
	if k.needRestart {
		k.restarts++
		p.restarts++
		k.needRestart = false
	}
}
