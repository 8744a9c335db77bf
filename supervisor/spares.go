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
// starting, one transition of the state table (table.takeSpare).
//
// One goroutine, keepSpares, starts spares one at a time whenever a slot is free that nobody
// waits for; Shutdown waits for it before closing the children. A spare that fails to start, or
// dies young, backs the keeper off like a chat's crashing child (spares.crash).

// spareReplaceDelay bounds how long a taken spare's replacement (no shared children) waits for the
// chat's first turn, which a codex start beside it would slow (docs/benchmarks.md).
const spareReplaceDelay = time.Second

// spareState is the spares' state in the table: the signal for chats that wait for a spare,
// and the spares' own restart backoff.
type spareState struct {
	changed chan struct{} // closed and replaced when a spare becomes ready or ends
	crash   crashBackoff  // the spares' own restart backoff
}

func newSpareState() spareState { return spareState{changed: make(chan struct{})} }

// notify wakes the chats waiting for a starting spare.
func (sp *spareState) notify() {
	close(sp.changed)
	sp.changed = make(chan struct{})
}

// crashed counts a spare's crash with cause and returns the backoff before the next spare and
// the crashes in a row.
func (sp *spareState) crashed(initial, maxInterval time.Duration, cause error, now time.Time) (time.Duration, int) {
	d := sp.crash.record(initial, maxInterval, cause, now)
	return d, sp.crash.count()
}

// backoff is how long the keeper waits before the next spare, after spares crashed.
func (sp *spareState) backoff(now time.Time) time.Duration { return sp.crash.wait(now) }

// healthy forgets the spares' crashes: a chat's turn completed on a child that was a spare.
func (sp *spareState) healthy() { sp.crash.reset() }

// spareKeeper is the keeper goroutine's signals, the pool's own.
type spareKeeper struct {
	kick chan struct{} // wakes keepSpares
	done chan struct{} // closed when keepSpares returned, or at once with no spares
}

func newSpareKeeper() spareKeeper {
	return spareKeeper{kick: make(chan struct{}, 1), done: make(chan struct{})}
}

// startSpares starts the spare keeper when Config.Spares asks for spares.
func (p *pool) startSpares() {
	if p.cfg.Spares == 0 {
		close(p.keeper.done)
		return
	}
	go p.keepSpares() // Shutdown waits for it (sparesStopped)
	p.kickSpares()
}

// sparesStopped is closed once the spare keeper returned: no spare starts after it.
func (p *pool) sparesStopped() <-chan struct{} { return p.keeper.done }

// notifySpares wakes chats waiting for a starting spare: one became ready or ended.
func (t *table) notifySpares() {
	t.spares.notify()
}

// startingSpare returns a channel closed when the next spare becomes ready or ends, or nil when a
// chat should not wait for one: a slot is free now, or no spare is starting. A spare that is
// starting holds a slot; without this wait a chat at the cap would evict a warm idle child while
// the spare it could take is a moment from ready.
func (p *pool) startingSpare() (changed <-chan struct{}) {
	p.st.do(func(t *table) { changed = t.startingSpare() })
	return changed
}

// startingSpare is pool.startingSpare's decision.
func (t *table) startingSpare() <-chan struct{} {
	if t.slots.Free(t.memory()) {
		return nil
	}
	for sess := range t.sessions {
		if sess.spare && sess.state == StateStarting {
			return t.spares.changed
		}
	}
	return nil
}

// kickSpares wakes the spare keeper: a spare was taken or a slot freed.
func (p *pool) kickSpares() {
	select {
	case p.keeper.kick <- struct{}{}:
	default:
	}
}

// keepSpares is the spare keeper's loop. It returns when the supervisor stops accepting work.
func (p *pool) keepSpares() {
	defer close(p.keeper.done)
	for {
		select {
		case <-p.accepting.Done():
			return
		case <-p.keeper.kick:
		}
		for {
			sess, wait := p.reserveSpare()
			if wait > 0 {
				t := time.NewTimer(wait) // a kick (a taken spare's first turn is over) cuts it short
				select {
				case <-t.C:
				case <-p.keeper.kick:
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
func (p *pool) reserveSpare() (sess *session, wait time.Duration) {
	p.st.do(func(t *table) { sess, wait = t.reserveSpare() })
	return sess, wait
}

// reserveSpare is pool.reserveSpare's transition.
func (t *table) reserveSpare() (*session, time.Duration) {
	if t.closed || t.freeze.active() || t.spareCount() >= t.cfg.Spares {
		return nil, 0
	}
	if wait := t.spares.backoff(time.Now()); wait > 0 {
		return nil, wait
	}
	for sess := range t.sessions { // a taken spare's first turn (settleSpare)
		if wait := time.Until(sess.replaceAfter); wait > 0 && t.hosts == nil && sess.state != StateRetiring {
			return nil, wait
		}
	}
	if !t.slots.Take(t.memory()) {
		return nil, 0
	}
	// The placeholder key is in no map: a spare belongs to no chat until one takes it.
	sess := t.newSession(&keyState{}, t.log.With(zap.Bool("spare", true)))
	sess.spare = true
	return sess, 0
}

// spareCount counts spares, ready or starting.
func (t *table) spareCount() int {
	n := 0
	for sess := range t.sessions {
		if sess.spare {
			n++
		}
	}
	return n
}

// startSpare spawns the reserved spare and starts its thread. On failure the spare is retired
// and its end counted by finish.
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
	p.st.do(func(t *table) { t.spareStarted(sess, id, warmed, err) })
}

// spareStarted settles a spare whose thread start (and warm-up) ended with err.
func (t *table) spareStarted(sess *session, id string, warmed bool, err error) {
	switch {
	case err != nil:
		sess.log.Warn("spare codex child could not start a thread or was left wedged by its warm-up", zap.Error(err))
		t.retire(sess, ReasonStartFailed, err)
	case sess.state != StateStarting:
		// The watcher saw it die.
	default:
		sess.spareThread, sess.threadID = id, id // the table shows it
		sess.spareWarmed = warmed
		sess.ready = true
		t.setState(sess, StateSpare)
		t.notifySpares()
		sess.log.Info("spare codex child ready", zap.String("thread_id", id))
		// Someone began waiting for a slot while the spare started: it is the first to go.
		t.rebalance()
	}
}

// takeSpare hands a ready spare to k, in StateStarting, or returns nil when none is ready.
func (p *pool) takeSpare(k *keyState) *session {
	var sess *session
	var child Child
	p.st.do(func(t *table) {
		if sess = t.takeSpare(k); sess != nil {
			child = sess.child
		}
	})
	if sess == nil {
		return nil
	}
	// The child's own lines (its codex client, its process) name the chat from now on, too.
	if r, ok := child.(logRelabeler); ok {
		r.SetLogger(childLogger(p.cfg.AppServer.Logger, p.cfg.Logger, k.key))
	}
	p.kickSpares()
	return sess
}

// takeSpare is pool.takeSpare's transition: a ready spare becomes k's session, in
// StateStarting.
func (t *table) takeSpare(k *keyState) *session {
	var sess *session
	for c := range t.sessions {
		if c.state == StateSpare {
			sess = c
			break
		}
	}
	if sess == nil || t.closed || t.hosts != nil && ownChild(k) {
		return nil
	}
	t.countRestart(k)
	t.setState(sess, StateStarting)
	sess.key, k.sess = k, sess
	sess.spare, sess.fromSpare = false, true
	sess.restarts = k.restarts
	sess.started = time.Now()                               // the crash window counts from the hand-out
	sess.replaceAfter = sess.started.Add(spareReplaceDelay) // the kick at the first idle times the wait
	sess.log = t.log.With(zap.String("chat_key", k.key), zap.Int("pid", sess.pid))
	return sess
}

// countRestart counts the key's next child as a restart when a watchdog or failure ended
// the last one.
func (t *table) countRestart(k *keyState) {
	if k.needRestart {
		k.restarts++
		t.restarts++
		k.needRestart = false
	}
}
