package keyfifo

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// recorder runs items under test control: each Run reports its item and blocks until released.
type recorder struct {
	started chan string
	release map[string]chan struct{}
	mu      sync.Mutex
	done    []string
	active  map[string]int
	overlap bool
}

func newRecorder(items ...string) *recorder {
	r := &recorder{started: make(chan string, len(items)), release: map[string]chan struct{}{}, active: map[string]int{}}
	for _, it := range items {
		r.release[it] = make(chan struct{})
	}
	return r
}

func (r *recorder) run(key, item string) {
	r.mu.Lock()
	r.active[key]++
	if r.active[key] > 1 {
		r.overlap = true
	}
	r.mu.Unlock()
	r.started <- item
	<-r.release[item]
	r.mu.Lock()
	r.active[key]--
	r.done = append(r.done, item)
	r.mu.Unlock()
}

func (r *recorder) next(t *testing.T) string {
	t.Helper()
	select {
	case it := <-r.started:
		return it
	case <-time.After(10 * time.Second):
		t.Fatal("no item started")
		return ""
	}
}

// TestOrderWithinKeyParallelAcrossKeys: a key's items run one at a time in push order, while
// another key's item runs alongside.
func TestOrderWithinKeyParallelAcrossKeys(t *testing.T) {
	r := newRecorder("a1", "a2", "a3", "b1")
	f := New(Config[string]{Run: r.run})
	f.Push("a", "a1")
	f.Push("a", "a2")
	f.Push("a", "a3")
	if got := r.next(t); got != "a1" {
		t.Fatalf("first started %s, want a1", got)
	}
	f.Push("b", "b1")
	// b1 starts while a1 still runs: keys do not wait for each other.
	if got := r.next(t); got != "b1" {
		t.Fatalf("started %s while a1 runs, want b1", got)
	}
	close(r.release["b1"])
	close(r.release["a1"])
	if got := r.next(t); got != "a2" {
		t.Fatalf("after a1 started %s, want a2", got)
	}
	close(r.release["a2"])
	if got := r.next(t); got != "a3" {
		t.Fatalf("after a2 started %s, want a3", got)
	}
	close(r.release["a3"])
	f.Wait()
	if r.overlap {
		t.Fatal("two items of one key ran at once")
	}
	var a []string
	for _, it := range r.done {
		if it[0] == 'a' {
			a = append(a, it)
		}
	}
	if !slices.Equal(a, []string{"a1", "a2", "a3"}) {
		t.Fatalf("key a finished %v, want [a1 a2 a3]", a)
	}
}

// TestWaitWaitsForWorkers: Wait returns only after every running item finished, and the idle
// hook saw each key's worker exit under the lock.
func TestWaitWaitsForWorkers(t *testing.T) {
	r := newRecorder("a1", "b1")
	var mu sync.Mutex
	var idle []string
	f := New(Config[string]{Run: r.run, Lock: &mu, Idle: func(key string) {
		if mu.TryLock() {
			t.Error("Idle called without the lock held")
			mu.Unlock()
		}
		idle = append(idle, key)
	}})
	f.Push("a", "a1")
	f.Push("b", "b1")
	r.next(t)
	r.next(t)
	waited := make(chan struct{})
	go func() { f.Wait(); close(waited) }()
	close(r.release["a1"])
	select {
	case <-waited:
		t.Fatal("Wait returned while b1 still runs")
	default:
	}
	close(r.release["b1"])
	<-waited
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(idle)
	if !slices.Equal(idle, []string{"a", "b"}) {
		t.Fatalf("idle keys %v, want [a b]", idle)
	}
	if f.BusyLocked("a") || f.BusyLocked("b") {
		t.Fatal("a key is busy after its worker exited")
	}
}

// TestRemoveLenDrain: waiting items can be counted, removed one by one, or drained; the running
// item is none of these.
func TestRemoveLenDrain(t *testing.T) {
	r := newRecorder("a1", "a2", "a3", "a4", "a5")
	var mu sync.Mutex
	f := New(Config[string]{Run: r.run, Lock: &mu})
	for _, it := range []string{"a1", "a2", "a3", "a4"} {
		f.Push("a", it)
	}
	r.next(t) // a1 runs
	mu.Lock()
	if n := f.LenLocked("a"); n != 3 {
		t.Fatalf("LenLocked = %d, want 3 waiting", n)
	}
	if f.RemoveLocked("a", func(s string) bool { return s == "a1" }) {
		t.Fatal("removed the running item")
	}
	if !f.RemoveLocked("a", func(s string) bool { return s == "a3" }) {
		t.Fatal("could not remove waiting a3")
	}
	if f.LenLocked("other") != 0 || f.BusyLocked("other") {
		t.Fatal("an unknown key has items or a worker")
	}
	f.PushLocked("a", "a5")
	mu.Unlock()
	if got := f.RemoveAll("b", func(string) bool { return true }); got != nil {
		t.Fatalf("RemoveAll of an idle key = %v", got)
	}
	mu.Lock()
	if got := f.RemoveAllLocked("a", func(s string) bool { return s != "a4" }); !slices.Equal(got, []string{"a2", "a5"}) {
		t.Fatalf("RemoveAllLocked = %v, want [a2 a5] in order", got)
	}
	if f.RemoveAllLocked("other", func(string) bool { return true }) != nil {
		t.Fatal("removed items of an unknown key")
	}
	got := f.DrainLocked()
	if !slices.Equal(got, []string{"a4"}) {
		t.Fatalf("drained %v, want [a4]", got)
	}
	if !f.BusyLocked("a") {
		t.Fatal("key not busy while its item runs")
	}
	mu.Unlock()
	close(r.release["a1"])
	f.Wait()
	if !slices.Equal(r.done, []string{"a1"}) {
		t.Fatalf("ran %v, want only a1", r.done)
	}
}

// Take sees every item as it leaves its queue, with the lock held and before Run: an owner
// looking under the lock finds each item either waiting or taken, never in between.
func TestTakeRunsUnderTheLockBeforeRun(t *testing.T) {
	var mu sync.Mutex
	taken := map[string]bool{}
	ran := make(chan string, 2)
	var f *FIFO[string]
	f = New(Config[string]{
		Lock: &mu,
		Take: func(key, item string) {
			// The lock is held: TryLock must fail.
			if mu.TryLock() {
				mu.Unlock()
				t.Errorf("Take(%s) without the lock", item)
			}
			taken[item] = true
		},
		Run: func(key, item string) {
			mu.Lock()
			ok := taken[item] && f.LenLocked(key) <= 1
			mu.Unlock()
			if !ok {
				t.Errorf("Run(%s) before Take", item)
			}
			ran <- item
		},
	})
	f.Push("k", "a")
	f.Push("k", "b")
	<-ran
	<-ran
	f.Wait()
}
