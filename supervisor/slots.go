package supervisor

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
)

type slotWaiter struct {
	ready   chan struct{} // closed with granted or err set
	granted bool
	err     error
}

// acquireSlot takes one of the MaxChildren slots, waiting (FIFO, bounded by SlotWait and ctx)
// while all are held; with MaxSlotWaiters keys waiting already it refuses at once. A waiter makes the least recently used idle child retire for it.
func (s *Supervisor) acquireSlot(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if s.used < s.cfg.MaxChildren && len(s.waiters) == 0 {
		s.used++
		s.mu.Unlock()
		return nil
	}
	if len(s.waiters) >= s.cfg.MaxSlotWaiters {
		n := len(s.waiters)
		s.mu.Unlock()
		return fmt.Errorf("%d chats already wait for one of %d codex slots: %w", n, s.cfg.MaxChildren, ErrNoSlot)
	}
	w := &slotWaiter{ready: make(chan struct{})}
	s.waiters = append(s.waiters, w)
	s.rebalanceLocked()
	s.mu.Unlock()

	t := time.NewTimer(s.cfg.SlotWait)
	defer t.Stop()
	var err error
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
		s.releaseSlotLocked()
	case w.err != nil:
		return w.err
	default:
		for i, q := range s.waiters {
			if q == w {
				s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
				break
			}
		}
	}
	return err
}

// releaseSlotLocked frees one slot, handing it straight to the first waiter so the cap holds.
func (s *Supervisor) releaseSlotLocked() {
	if len(s.waiters) > 0 {
		w := s.waiters[0]
		s.waiters[0] = nil
		s.waiters = s.waiters[1:]
		w.granted = true
		close(w.ready)
		return
	}
	s.used--
}

// rebalanceLocked retires idle children until every slot waiter has a retiring child whose slot
// it will get.
func (s *Supervisor) rebalanceLocked() {
	for len(s.waiters) > s.retiring {
		v := s.lruIdleLocked()
		if v == nil {
			return
		}
		v.log.Info("evicting least recently used idle child", zap.Int("waiting", len(s.waiters)))
		s.retireLocked(v, ReasonEvicted, nil)
	}
}

// lruIdleLocked picks the eviction victim: the least recently used idle child whose chat key has
// nothing queued. A child between two queued turns of its key is not idle in any useful sense:
// evicting it would only make its key respawn at once, so a slot waiter waits instead (bounded
// by SlotWait).
func (s *Supervisor) lruIdleLocked() *session {
	var best *session
	for sess := range s.sessions {
		if sess.state != StateIdle || len(sess.key.queue) > 0 {
			continue
		}
		if best == nil || sess.useSeq < best.useSeq {
			best = sess
		}
	}
	return best
}
