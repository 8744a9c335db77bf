package supervisor

import (
	"errors"
	"testing"
)

func isReady(w *slotWaiter) bool {
	select {
	case <-w.ready:
		return true
	default:
		return false
	}
}

// TestSlotsCapAndFIFO: slots are handed out up to the cap, then waiters queue and get released
// slots in arrival order, each released slot going to the head waiter so the cap holds.
func TestSlotsCapAndFIFO(t *testing.T) {
	t.Parallel()
	p := &slots{max: 2, maxWaiters: 5}
	for i := range 2 {
		if !p.take(memUse{}) {
			t.Fatalf("take %d refused below the cap", i+1)
		}
	}
	if p.take(memUse{}) {
		t.Fatal("take granted a slot over the cap")
	}
	a, errA := p.join()
	b, errB := p.join()
	if errA != nil || errB != nil {
		t.Fatalf("join: %v, %v", errA, errB)
	}
	if got := p.waiting(); got != 2 {
		t.Fatalf("waiting = %d, want 2", got)
	}
	p.release()
	p.grant(memUse{})
	if !isReady(a) || !a.granted || isReady(b) {
		t.Fatalf("after one release: a ready=%v granted=%v, b ready=%v; want a granted, b waiting", isReady(a), a.granted, isReady(b))
	}
	if p.used != 2 {
		t.Fatalf("used = %d after a hand-over, want 2", p.used)
	}
	p.release()
	p.grant(memUse{})
	if !isReady(b) || !b.granted {
		t.Fatal("second release did not grant b")
	}
	p.release()
	if p.used != 1 || p.waiting() != 0 {
		t.Fatalf("used = %d, waiting = %d; want 1, 0", p.used, p.waiting())
	}
}

// TestSlotsTakeQueuesBehindWaiters: a free slot is not taken past keys already waiting.
func TestSlotsTakeQueuesBehindWaiters(t *testing.T) {
	t.Parallel()
	p := &slots{max: 1, maxWaiters: 5, used: 0}
	p.waiters = append(p.waiters, &slotWaiter{ready: make(chan struct{})})
	if p.take(memUse{}) {
		t.Fatal("take jumped the waiter queue")
	}
}

// TestSlotsMaxWaiters: with maxWaiters keys waiting, join refuses at once with ErrNoSlot.
func TestSlotsMaxWaiters(t *testing.T) {
	t.Parallel()
	p := &slots{max: 1, maxWaiters: 2, used: 1}
	for range 2 {
		if _, err := p.join(); err != nil {
			t.Fatalf("join: %v", err)
		}
	}
	if _, err := p.join(); !errors.Is(err, ErrNoSlot) {
		t.Fatalf("third join: %v, want ErrNoSlot", err)
	}
	if got := p.waiting(); got != 2 {
		t.Fatalf("waiting = %d, want 2", got)
	}
}

// TestSlotsLeaveAndFail: a waiter that gives up leaves the queue without a slot; fail wakes every
// waiter with the error.
func TestSlotsLeaveAndFail(t *testing.T) {
	t.Parallel()
	p := &slots{max: 1, maxWaiters: 5, used: 1}
	a, _ := p.join()
	b, _ := p.join()
	c, _ := p.join()
	p.leave(b)
	p.release()
	p.grant(memUse{})
	if !a.granted || b.granted || c.granted {
		t.Fatalf("granted a=%v b=%v c=%v, want only a", a.granted, b.granted, c.granted)
	}
	p.fail(ErrClosed)
	if !isReady(c) || !errors.Is(c.err, ErrClosed) {
		t.Fatalf("c ready=%v err=%v, want closed with ErrClosed", isReady(c), c.err)
	}
	if isReady(b) {
		t.Fatal("a waiter that left was woken")
	}
	if p.waiting() != 0 {
		t.Fatalf("waiting = %d after fail, want 0", p.waiting())
	}
}

// TestSlotsShort: each retiring child covers one waiter.
func TestSlotsShort(t *testing.T) {
	t.Parallel()
	p := &slots{max: 1, maxWaiters: 5, used: 1}
	p.join()
	p.join()
	if !p.short(memUse{}) {
		t.Fatal("two waiters, no retiring child: want short")
	}
	p.retiring = 1
	if !p.short(memUse{}) {
		t.Fatal("two waiters, one retiring child under a cap of 1: want short")
	}
	p.max = 2
	if p.short(memUse{}) {
		t.Fatal("two waiters, cap 2, one retiring child: both will fit")
	}
}

// TestSlotsBudget: below the count cap a slot is free only while one more estimate fits the
// budget; the first child always fits; grants stop at the budget; a retiring child's memory
// counts as given back for the waiters.
func TestSlotsBudget(t *testing.T) {
	t.Parallel()
	p := &slots{max: 8, maxWaiters: 5, budget: 250}
	if !p.take(memUse{held: 0, estimate: 400}) {
		t.Fatal("the first child did not fit a budget smaller than it")
	}
	if p.take(memUse{held: 160, estimate: 100}) {
		t.Fatal("160 held + 100 fits 250")
	}
	if !p.take(memUse{held: 150, estimate: 100}) {
		t.Fatal("150 held + 100 does not fit 250")
	}
	a, _ := p.join()
	b, _ := p.join()
	u := memUse{held: 200, estimate: 100}
	p.grant(u)
	if isReady(a) {
		t.Fatal("granted past the budget")
	}
	if !p.short(u) {
		t.Fatal("nothing retiring: want short")
	}
	p.retiring = 1
	if p.short(memUse{held: 200, freeing: 150, estimate: 100}) {
		t.Fatal("after the retiring 150 go, 50 + 100 + 100 fits 250: want not short")
	}
	if !p.short(memUse{held: 200, freeing: 100, estimate: 100}) {
		t.Fatal("after the retiring 100 go, 100 + 100 + 100 does not fit 250: want short")
	}
	p.grant(memUse{held: 50, estimate: 100})
	if !a.granted || !b.granted || p.used != 4 {
		t.Fatalf("grant with room for two: a %v b %v used %d", a.granted, b.granted, p.used)
	}
}

// TestLRUIdle: the victim is the idle child used longest ago whose key has nothing queued.
func TestLRUIdle(t *testing.T) {
	t.Parallel()
	queued := map[string]int{}
	mk := func(key string, state State, useSeq uint64, n int) *session {
		queued[key] = n
		return &session{key: &keyState{key: key}, state: state, useSeq: useSeq}
	}
	busyOld := mk("busy", StateBusy, 1, 0)
	backlogged := mk("backlogged", StateIdle, 2, 1)
	want := mk("want", StateIdle, 3, 0)
	newer := mk("newer", StateIdle, 4, 0)
	retiring := mk("retiring", StateRetiring, 0, 0)
	count := func(key string) int { return queued[key] }
	sessions := map[*session]struct{}{busyOld: {}, backlogged: {}, want: {}, newer: {}, retiring: {}}
	if got := lruIdle(sessions, count); got != want {
		t.Fatalf("lruIdle picked useSeq %d state %s, want the idle useSeq 3", got.useSeq, got.state)
	}
	delete(sessions, want)
	delete(sessions, newer)
	if got := lruIdle(sessions, count); got != nil {
		t.Fatalf("lruIdle picked useSeq %d with no eligible child, want nil", got.useSeq)
	}
}
