package supervisor

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// slots is the cap on live children: max slots, held one per session plus grants in hand, and a
// FIFO of chat keys waiting for one, at most maxWaiters long.
//
// Locking: slots has no lock of its own; every method runs under Supervisor.mu. The pool's
// bookkeeping (sessions and their states, key queues) and the slots change together in one
// critical section, so that an eviction decision and the waiters it serves stay consistent;
// splitting the lock would let a release and a rebalance interleave differently than today.
type slots struct {
	max        int
	maxWaiters int

	used     int           // slots held: one per session, plus grants in hand
	waiters  []*slotWaiter // FIFO of chat keys waiting for a slot
	retiring int           // sessions in StateRetiring: each will free a slot
}

// slotWaiter is one chat key waiting for a slot. ready is closed once granted or err is set.
type slotWaiter struct {
	ready   chan struct{}
	granted bool
	err     error
}

// take holds a free slot when one is free and nobody waits for one already.
func (p *slots) take() bool {
	if p.used < p.max && len(p.waiters) == 0 {
		p.used++
		return true
	}
	return false
}

// join queues a waiter behind the others, refusing with ErrNoSlot when maxWaiters already wait.
func (p *slots) join() (*slotWaiter, error) {
	if n := len(p.waiters); n >= p.maxWaiters {
		return nil, fmt.Errorf("%d chats already wait for one of %d codex slots: %w", n, p.max, ErrNoSlot)
	}
	w := &slotWaiter{ready: make(chan struct{})}
	p.waiters = append(p.waiters, w)
	return w, nil
}

// leave takes a waiter that gave up out of the queue. A waiter already granted or failed is not
// in it.
func (p *slots) leave(w *slotWaiter) {
	for i, q := range p.waiters {
		if q == w {
			p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
			return
		}
	}
}

// release frees one slot, handing it straight to the first waiter so the cap holds.
func (p *slots) release() {
	if len(p.waiters) > 0 {
		w := p.waiters[0]
		p.waiters[0] = nil
		p.waiters = p.waiters[1:]
		w.granted = true
		close(w.ready)
		return
	}
	p.used--
}

// fail wakes every waiter with err and empties the queue.
func (p *slots) fail(err error) {
	for _, w := range p.waiters {
		w.err = err
		close(w.ready)
	}
	p.waiters = nil
}

// waiting is the number of chat keys waiting for a slot.
func (p *slots) waiting() int { return len(p.waiters) }

// shortfall is the number of waiters no retiring child will free a slot for yet.
func (p *slots) shortfall() int { return len(p.waiters) - p.retiring }

// lruIdle picks the eviction victim among sessions: a ready spare if there is one (it serves no
// chat yet), else the least recently used idle child whose chat key has nothing queued. A child
// between two queued turns of its key is not idle in any useful sense: evicting it would only
// make its key respawn at once, so a slot waiter waits instead (bounded by SlotWait).
func lruIdle(sessions map[*session]struct{}, queued func(key string) int) *session {
	var best *session
	for sess := range sessions {
		if sess.state == StateSpare {
			return sess
		}
		if sess.state != StateIdle || queued(sess.key.key) > 0 {
			continue
		}
		if best == nil || sess.useSeq < best.useSeq {
			best = sess
		}
	}
	return best
}

// acquireSlot takes one of the MaxChildren slots, waiting (FIFO, bounded by SlotWait and ctx)
// while all are held; with MaxSlotWaiters keys waiting already it refuses at once. A waiter
// makes the least recently used idle child retire for it.
func (s *Supervisor) acquireSlot(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if s.slots.take() {
		s.mu.Unlock()
		return nil
	}
	w, err := s.slots.join()
	if err != nil {
		s.mu.Unlock()
		return err
	}
	s.rebalanceLocked()
	s.mu.Unlock()

	t := time.NewTimer(s.cfg.SlotWait)
	defer t.Stop()
	select {
	case <-w.ready:
		return w.err
	case <-ctx.Done():
		err = context.Cause(ctx)
	case <-t.C:
		err = fmt.Errorf("waited %s for one of %d codex slots: %w", s.cfg.SlotWait, s.cfg.MaxChildren, ErrNoSlot)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case w.granted && ctx.Err() == nil:
		return nil // granted just as the wait ran out: use it
	case w.granted:
		s.slots.release()
	case w.err != nil:
		return w.err
	default:
		s.slots.leave(w)
	}
	return err
}

// rebalanceLocked retires idle children until every slot waiter has a retiring child whose slot
// it will get.
func (s *Supervisor) rebalanceLocked() {
	for s.slots.shortfall() > 0 {
		v := lruIdle(s.sessions, s.queue.LenLocked)
		if v == nil {
			return
		}
		v.log.Info("evicting least recently used idle child", zap.Int("waiting", s.slots.waiting()))
		s.retireLocked(v, ReasonEvicted, nil)
	}
}
