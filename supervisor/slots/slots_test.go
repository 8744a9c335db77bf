package slots

import (
	"errors"
	"testing"
)

func isReady(w *Waiter) bool {
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
	p := &Slots{max: 2, maxWaiters: 5}
	for i := range 2 {
		if !p.Take(Use{}) {
			t.Fatalf("take %d refused below the cap", i+1)
		}
	}
	if p.Take(Use{}) {
		t.Fatal("take granted a slot over the cap")
	}
	a, errA := p.Join()
	b, errB := p.Join()
	if errA != nil || errB != nil {
		t.Fatalf("join: %v, %v", errA, errB)
	}
	if got := p.Waiting(); got != 2 {
		t.Fatalf("waiting = %d, want 2", got)
	}
	p.Release()
	p.Grant(Use{})
	if !isReady(a) || !a.granted || isReady(b) {
		t.Fatalf("after one release: a ready=%v granted=%v, b ready=%v; want a granted, b waiting", isReady(a), a.granted, isReady(b))
	}
	if p.used != 2 {
		t.Fatalf("used = %d after a hand-over, want 2", p.used)
	}
	p.Release()
	p.Grant(Use{})
	if !isReady(b) || !b.granted {
		t.Fatal("second release did not grant b")
	}
	p.Release()
	if p.used != 1 || p.Waiting() != 0 {
		t.Fatalf("used = %d, waiting = %d; want 1, 0", p.used, p.Waiting())
	}
}

// TestSlotsTakeQueuesBehindWaiters: a free slot is not taken past keys already waiting.
func TestSlotsTakeQueuesBehindWaiters(t *testing.T) {
	t.Parallel()
	p := &Slots{max: 1, maxWaiters: 5, used: 0}
	p.waiters = append(p.waiters, &Waiter{ready: make(chan struct{})})
	if p.Take(Use{}) {
		t.Fatal("take jumped the waiter queue")
	}
}

// TestSlotsMaxWaiters: with maxWaiters keys waiting, join refuses at once with ErrNoSlot.
func TestSlotsMaxWaiters(t *testing.T) {
	t.Parallel()
	p := &Slots{max: 1, maxWaiters: 2, used: 1}
	for range 2 {
		if _, err := p.Join(); err != nil {
			t.Fatalf("join: %v", err)
		}
	}
	if _, err := p.Join(); !errors.Is(err, ErrNoSlot) {
		t.Fatalf("third join: %v, want ErrNoSlot", err)
	}
	if got := p.Waiting(); got != 2 {
		t.Fatalf("waiting = %d, want 2", got)
	}
}

// TestSlotsLeaveAndFail: a waiter that gives up leaves the queue without a slot; fail wakes every
// waiter with the error.
func TestSlotsLeaveAndFail(t *testing.T) {
	t.Parallel()
	p := &Slots{max: 1, maxWaiters: 5, used: 1}
	a, _ := p.Join()
	b, _ := p.Join()
	c, _ := p.Join()
	p.Leave(b)
	p.Release()
	p.Grant(Use{})
	if !a.granted || b.granted || c.granted {
		t.Fatalf("granted a=%v b=%v c=%v, want only a", a.granted, b.granted, c.granted)
	}
	errClosed := errors.New("closed")
	p.Fail(errClosed)
	if !isReady(c) || !errors.Is(c.Err(), errClosed) {
		t.Fatalf("c ready=%v err=%v, want closed with the error Fail was given", isReady(c), c.Err())
	}
	if isReady(b) {
		t.Fatal("a waiter that left was woken")
	}
	if p.Waiting() != 0 {
		t.Fatalf("waiting = %d after fail, want 0", p.Waiting())
	}
}

// TestSlotsShort: each retiring child covers one waiter.
func TestSlotsShort(t *testing.T) {
	t.Parallel()
	p := &Slots{max: 1, maxWaiters: 5, used: 1}
	p.Join()
	p.Join()
	if !p.Short(Use{}) {
		t.Fatal("two waiters, no retiring child: want short")
	}
	p.retiring = 1
	if !p.Short(Use{}) {
		t.Fatal("two waiters, one retiring child under a cap of 1: want short")
	}
	p.max = 2
	if p.Short(Use{}) {
		t.Fatal("two waiters, cap 2, one retiring child: both will fit")
	}
}

// TestSlotsBudget: below the count cap a slot is free only while one more estimate fits the
// budget; the first child always fits; grants stop at the budget; a retiring child's memory
// counts as given back for the waiters.
func TestSlotsBudget(t *testing.T) {
	t.Parallel()
	p := &Slots{max: 8, maxWaiters: 5, budget: 250}
	if !p.Take(Use{Held: 0, Estimate: 400}) {
		t.Fatal("the first child did not fit a budget smaller than it")
	}
	if p.Take(Use{Held: 160, Estimate: 100}) {
		t.Fatal("160 held + 100 fits 250")
	}
	if !p.Take(Use{Held: 150, Estimate: 100}) {
		t.Fatal("150 held + 100 does not fit 250")
	}
	a, _ := p.Join()
	b, _ := p.Join()
	u := Use{Held: 200, Estimate: 100}
	p.Grant(u)
	if isReady(a) {
		t.Fatal("granted past the budget")
	}
	if !p.Short(u) {
		t.Fatal("nothing retiring: want short")
	}
	p.retiring = 1
	if p.Short(Use{Held: 200, Freeing: 150, Estimate: 100}) {
		t.Fatal("after the retiring 150 go, 50 + 100 + 100 fits 250: want not short")
	}
	if !p.Short(Use{Held: 200, Freeing: 100, Estimate: 100}) {
		t.Fatal("after the retiring 100 go, 100 + 100 + 100 does not fit 250: want short")
	}
	p.Grant(Use{Held: 50, Estimate: 100})
	if !a.granted || !b.granted || p.used != 4 {
		t.Fatalf("grant with room for two: a %v b %v used %d", a.granted, b.granted, p.used)
	}
}
