// Package slots admits new codex children: a cap on their number, a budget on their memory,
// and a FIFO of the chats that wait for one. It has no lock of its own: its owner (the
// supervisor's state table) keeps it under its lock, beside the sessions whose states it counts.
package slots

import (
	"errors"
	"fmt"
)

// ErrNoSlot means every child slot stayed busy for longer than the slot wait, or too many chats
// wait for one already.
var ErrNoSlot = errors.New("all codex sessions are busy")

// Use is the pool's memory as the budget counts it (see the supervisor's Config.MemoryBudget).
type Use struct {
	// Held is charged to the slots held: each child's latest PSS reading, and the estimate for a
	// slot whose child was not measured yet (a grant in hand, a child starting, one that started
	// since the last sample). Charging those keeps a burst of new chats from all fitting into
	// the room one stale sample shows.
	Held int64
	// Freeing is the part of Held that retiring children give back once reaped.
	Freeing int64
	// Estimate is what one more child is expected to cost.
	Estimate int64
	// Measured sums the latest PSS readings.
	Measured int64
}

// Slots admits new children. A slot is free when two conditions hold: fewer than max are held,
// and one more child's estimate fits the memory budget beside what the pool holds (Use).
// Slots are held one per session plus grants in hand; chat keys wait for one in a FIFO at most
// maxWaiters long. The pool always admits one child, whatever the budget, so a budget smaller
// than one child slows the daemon down instead of stopping it.
//
// Locking: Slots has no lock of its own; its owner calls every method under the lock that
// guards the sessions and queues too, so that an eviction decision and the waiters it serves
// stay consistent: a lock of its own would let a release and a rebalance interleave.
type Slots struct {
	max        int
	maxWaiters int
	budget     int64 // bytes of PSS; <= 0: no budget

	used     int       // slots held: one per session, plus grants in hand
	waiters  []*Waiter // FIFO of chat keys waiting for a slot
	retiring int       // sessions in StateRetiring: each will free a slot
}

func New(max, maxWaiters int, budget int64) Slots {
	return Slots{max: max, maxWaiters: maxWaiters, budget: budget}
}

// Held is the number of slots held: one per session, plus grants in hand.
func (p *Slots) Held() int { return p.used }

// Budget is the memory budget; <= 0: none.
func (p *Slots) Budget() int64 { return p.budget }

// Moved counts a session's change of state: one that became retiring will free its slot, one
// that stopped retiring (it died) no longer will.
func (p *Slots) Moved(wasRetiring, isRetiring bool) {
	if wasRetiring {
		p.retiring--
	}
	if isRetiring {
		p.retiring++
	}
}

// Waiter is one chat key waiting for a slot. ready is closed once granted or err is set.
type Waiter struct {
	ready   chan struct{}
	granted bool
	err     error
}

// Ready is closed once w was granted a slot or failed.
func (w *Waiter) Ready() <-chan struct{} { return w.ready }

// Granted reports whether w holds a slot; read it once Ready is closed, or under the lock the
// slots are kept under.
func (w *Waiter) Granted() bool { return w.granted }

// Err is why w failed (the supervisor closed), nil otherwise.
func (w *Waiter) Err() error { return w.err }

// fits reports whether one more child fits beside used slots holding held bytes, a new child
// costing estimate.
func (p *Slots) fits(used int, held, estimate int64) bool {
	if used >= p.max {
		return false
	}
	return p.budget <= 0 || used == 0 || held+estimate <= p.budget
}

// Take holds a free slot when one is free and nobody waits for one already.
func (p *Slots) Take(u Use) bool {
	if len(p.waiters) == 0 && p.fits(p.used, u.Held, u.Estimate) {
		p.used++
		return true
	}
	return false
}

// Free reports whether take would succeed.
func (p *Slots) Free(u Use) bool {
	return len(p.waiters) == 0 && p.fits(p.used, u.Held, u.Estimate)
}

// Join queues a waiter behind the others, refusing with ErrNoSlot when maxWaiters already wait.
func (p *Slots) Join() (*Waiter, error) {
	if n := len(p.waiters); n >= p.maxWaiters {
		return nil, fmt.Errorf("%d chats already wait for one of %d codex slots: %w", n, p.max, ErrNoSlot)
	}
	w := &Waiter{ready: make(chan struct{})}
	p.waiters = append(p.waiters, w)
	return w, nil
}

// Leave takes a waiter that gave up out of the queue. A waiter already granted or failed is not
// in it.
func (p *Slots) Leave(w *Waiter) {
	for i, q := range p.waiters {
		if q == w {
			p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
			return
		}
	}
}

// Release frees one slot. The caller then grants what is free to the waiters (grant): a freed
// slot may not fit the budget for the next waiter, and a sample may free room without a release.
func (p *Slots) Release() { p.used-- }

// Grant hands free slots to the waiters in FIFO order while one more child fits, charging each
// grant the estimate.
func (p *Slots) Grant(u Use) {
	held := u.Held
	for len(p.waiters) > 0 && p.fits(p.used, held, u.Estimate) {
		w := p.waiters[0]
		p.waiters[0] = nil
		p.waiters = p.waiters[1:]
		w.granted = true
		close(w.ready)
		p.used++
		held += u.Estimate
	}
}

// Fail wakes every waiter with err and empties the queue.
func (p *Slots) Fail(err error) {
	for _, w := range p.waiters {
		w.err = err
		close(w.ready)
	}
	p.waiters = nil
}

// Waiting is the number of chat keys waiting for a slot.
func (p *Slots) Waiting() int { return len(p.waiters) }

// Short reports whether some waiter would still find no free slot once every retiring child is
// gone: then an idle child has to go too.
func (p *Slots) Short(u Use) bool {
	used, held := p.used-p.retiring, u.Held-u.Freeing
	for range p.waiters {
		if !p.fits(used, held, u.Estimate) {
			return true
		}
		used++
		held += u.Estimate
	}
	return false
}
