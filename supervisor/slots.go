package supervisor

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// slots admits new children. A slot is free when two conditions hold: fewer than max are held,
// and one more child's estimate fits the memory budget beside what the pool holds (memUse).
// Slots are held one per session plus grants in hand; chat keys wait for one in a FIFO at most
// maxWaiters long. The pool always admits one child, whatever the budget, so a budget smaller
// than one child slows the daemon down instead of stopping it.
//
// Locking: slots has no lock of its own; it is part of the state table, and every method runs
// under the table's lock. The sessions and their states, the key queues and the slots change
// together in one critical section, so that an eviction decision and the waiters it serves stay consistent;
// splitting the lock would let a release and a rebalance interleave differently than today.
type slots struct {
	max        int
	maxWaiters int
	budget     int64 // bytes of PSS; <= 0: no budget

	used     int           // slots held: one per session, plus grants in hand
	waiters  []*slotWaiter // FIFO of chat keys waiting for a slot
	retiring int           // sessions in StateRetiring: each will free a slot
}

func newSlots(max, maxWaiters int, budget int64) slots {
	return slots{max: max, maxWaiters: maxWaiters, budget: budget}
}

// held is the number of slots held: one per session, plus grants in hand.
func (p *slots) held() int { return p.used }

// budgetBytes is the memory budget; <= 0: none.
func (p *slots) budgetBytes() int64 { return p.budget }

// moved counts a session's move from one state to another: a retiring session will free its
// slot.
func (p *slots) moved(from, to State) {
	if from == StateRetiring {
		p.retiring--
	}
	if to == StateRetiring {
		p.retiring++
	}
}

// slotWaiter is one chat key waiting for a slot. ready is closed once granted or err is set.
type slotWaiter struct {
	ready   chan struct{}
	granted bool
	err     error
}

// fits reports whether one more child fits beside used slots holding held bytes, a new child
// costing estimate.
func (p *slots) fits(used int, held, estimate int64) bool {
	if used >= p.max {
		return false
	}
	return p.budget <= 0 || used == 0 || held+estimate <= p.budget
}

// take holds a free slot when one is free and nobody waits for one already.
func (p *slots) take(u memUse) bool {
	if len(p.waiters) == 0 && p.fits(p.used, u.held, u.estimate) {
		p.used++
		return true
	}
	return false
}

// free reports whether take would succeed.
func (p *slots) free(u memUse) bool {
	return len(p.waiters) == 0 && p.fits(p.used, u.held, u.estimate)
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

// release frees one slot. The caller then grants what is free to the waiters (grant): a freed
// slot may not fit the budget for the next waiter, and a sample may free room without a release.
func (p *slots) release() { p.used-- }

// grant hands free slots to the waiters in FIFO order while one more child fits, charging each
// grant the estimate.
func (p *slots) grant(u memUse) {
	held := u.held
	for len(p.waiters) > 0 && p.fits(p.used, held, u.estimate) {
		w := p.waiters[0]
		p.waiters[0] = nil
		p.waiters = p.waiters[1:]
		w.granted = true
		close(w.ready)
		p.used++
		held += u.estimate
	}
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

// short reports whether some waiter would still find no free slot once every retiring child is
// gone: then an idle child has to go too.
func (p *slots) short(u memUse) bool {
	used, held := p.used-p.retiring, u.held-u.freeing
	for range p.waiters {
		if !p.fits(used, held, u.estimate) {
			return true
		}
		used++
		held += u.estimate
	}
	return false
}

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

// acquireSlot takes a free slot (slots), waiting (FIFO, bounded by SlotWait and ctx) while none
// is free; with MaxSlotWaiters keys waiting already it refuses at once. A waiter makes the least
// recently used idle child retire for it.
func (p *pool) acquireSlot(ctx context.Context) error {
	var w *slotWaiter
	var err error
	if p.st.do(func(t *table) { w, err = t.joinSlot() }); w == nil {
		return err
	}
	timer := time.NewTimer(p.cfg.SlotWait)
	defer timer.Stop()
	select {
	case <-w.ready:
		return w.err
	case <-ctx.Done():
		err = context.Cause(ctx)
	case <-timer.C:
		err = fmt.Errorf("waited %s for a codex slot (at most %d children, memory budget %s): %w",
			p.cfg.SlotWait, p.cfg.MaxChildren, budgetText(p.cfg.MemoryBudget), ErrNoSlot)
	}
	p.st.do(func(t *table) { err = t.leaveSlot(w, ctx.Err() == nil, err) })
	return err
}

// joinSlot takes a free slot (nil, nil) or joins the waiters (w); it errs when closed or when
// too many wait.
func (t *table) joinSlot() (*slotWaiter, error) {
	if t.closed {
		return nil, ErrClosed
	}
	if t.slots.take(t.memory()) {
		return nil, nil
	}
	w, err := t.slots.join()
	if err != nil {
		return nil, err
	}
	t.rebalance()
	return w, nil
}

// leaveSlot ends w's wait, which ended with err (wanted: its caller still wants the slot): a
// slot granted just as the wait ran out is used (nil) when wanted and freed when not.
func (t *table) leaveSlot(w *slotWaiter, wanted bool, err error) error {
	switch {
	case w.granted && wanted:
		return nil // granted just as the wait ran out: use it
	case w.granted:
		t.releaseSlot()
	case w.err != nil:
		return w.err
	default:
		t.slots.leave(w)
	}
	return err
}

// releaseSlot frees one slot and serves the waiters.
func (t *table) releaseSlot() {
	t.slots.release()
	t.serveWaiters()
}

// serveWaiters grants the waiters what is free now and evicts idle children for the rest.
func (t *table) serveWaiters() {
	if t.slots.waiting() == 0 {
		return
	}
	t.slots.grant(t.memory())
	t.rebalance()
}

// rebalance retires idle children until every slot waiter will find a free slot once the
// retiring children are gone. Each eviction frees a slot and the child's memory; when the budget
// is held by busy children, evicting every idle one may still not be enough, and the waiters wait
// for turns to end (bounded by SlotWait).
func (t *table) rebalance() {
	for t.slots.short(t.memory()) {
		v := t.victim()
		if v == nil {
			return
		}
		v.log.Info("evicting least recently used idle child", zap.Int("waiting", t.slots.waiting()),
			zap.Int64("pss_bytes", v.mem.PSS))
		t.retire(v, ReasonEvicted, nil)
	}
}

// victim picks the child to evict for a slot waiter, nil when none may go.
func (t *table) victim() *session {
	return lruIdle(t.sessions, t.queued)
}

// budgetText renders a memory budget for messages.
func budgetText(b int64) string {
	if b <= 0 {
		return "none"
	}
	return fmt.Sprintf("%d MiB", b>>20)
}
