// Package keyfifo runs work items by key: in arrival order within a key, keys in parallel. A
// key with items has exactly one worker goroutine, which runs them one at a time and exits when
// the key's queue is empty; the owner waits for every worker with Wait.
package keyfifo

import "sync"

// Config configures a FIFO.
type Config[T any] struct {
	// Run handles one item of key. It runs on the key's worker goroutine, without the lock.
	Run func(key string, item T)
	// Take, when set, is called with the lock held as an item leaves its queue to be run, before
	// Run. Owners use it to make the item visible in their own state at the moment it stops being
	// visible in the queue: otherwise, between the two, the item is in neither, and whoever
	// looks for it (to cancel it, say) misses it.
	Take func(key string, item T)
	// Idle, when set, is called with the lock held as a key's worker exits: the key has no
	// queued item and no worker. Owners use it to forget their own per-key state.
	Idle func(key string)
	// Lock is the lock that guards the queues. Owners whose per-key state must change together
	// with the queues pass their own; nil means a lock of the FIFO's own.
	Lock sync.Locker
}

// FIFO is a set of per-key queues, each drained by its own worker goroutine.
//
// Locking: the queues are guarded by Config.Lock. Methods named ...Locked must be called with
// it held; Push and Wait take no lock held by the caller.
type FIFO[T any] struct {
	run    func(string, T)
	take   func(string, T)
	idle   func(string)
	mu     sync.Locker
	queues map[string]*queue[T] // a key is present while its worker runs
	wg     sync.WaitGroup
}

type queue[T any] struct {
	waiting []T // FIFO; the item being run is not in it
}

// New returns an empty FIFO.
func New[T any](cfg Config[T]) *FIFO[T] {
	mu := cfg.Lock
	if mu == nil {
		mu = new(sync.Mutex)
	}
	return &FIFO[T]{run: cfg.Run, take: cfg.Take, idle: cfg.Idle, mu: mu, queues: make(map[string]*queue[T])}
}

// Push appends item to key's queue, starting the key's worker when it has none.
func (f *FIFO[T]) Push(key string, item T) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.PushLocked(key, item)
}

// PushLocked is Push with the lock held.
func (f *FIFO[T]) PushLocked(key string, item T) {
	if q := f.queues[key]; q != nil {
		q.waiting = append(q.waiting, item)
		return
	}
	f.queues[key] = &queue[T]{waiting: []T{item}}
	f.wg.Add(1)
	go f.work(key)
}

// LenLocked is the number of key's items waiting; the one being run does not count.
func (f *FIFO[T]) LenLocked(key string) int {
	if q := f.queues[key]; q != nil {
		return len(q.waiting)
	}
	return 0
}

// BusyLocked reports whether key has a worker (and so possibly items waiting).
func (f *FIFO[T]) BusyLocked(key string) bool { return f.queues[key] != nil }

// RemoveLocked takes the first waiting item of key that match reports out of the queue. It
// reports whether there was one; an item already handed to Run is not waiting.
func (f *FIFO[T]) RemoveLocked(key string, match func(T) bool) bool {
	q := f.queues[key]
	if q == nil {
		return false
	}
	for i, it := range q.waiting {
		if match(it) {
			q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
			return true
		}
	}
	return false
}

// EachLocked calls fn with each waiting item of key, in order.
func (f *FIFO[T]) EachLocked(key string, fn func(T)) {
	if q := f.queues[key]; q != nil {
		for _, it := range q.waiting {
			fn(it)
		}
	}
}

// RemoveAll is RemoveAllLocked taking the lock.
func (f *FIFO[T]) RemoveAll(key string, match func(T) bool) []T {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.RemoveAllLocked(key, match)
}

// RemoveAllLocked takes every waiting item of key that match reports out of the queue, in order,
// and returns them.
func (f *FIFO[T]) RemoveAllLocked(key string, match func(T) bool) []T {
	q := f.queues[key]
	if q == nil {
		return nil
	}
	var out []T
	kept := q.waiting[:0]
	for _, it := range q.waiting {
		if match(it) {
			out = append(out, it)
		} else {
			kept = append(kept, it)
		}
	}
	clear(q.waiting[len(kept):]) // no stale references behind the kept items
	q.waiting = kept
	return out
}

// DrainLocked takes every waiting item of every key out of the queues and returns them. Running
// items finish; their workers then find their queues empty and exit.
func (f *FIFO[T]) DrainLocked() []T {
	var out []T
	for _, q := range f.queues {
		out = append(out, q.waiting...)
		q.waiting = nil
	}
	return out
}

// Wait returns when every worker has exited. The owner stops pushing before it calls Wait.
func (f *FIFO[T]) Wait() { f.wg.Wait() }

func (f *FIFO[T]) work(key string) {
	defer f.wg.Done()
	for {
		f.mu.Lock()
		q := f.queues[key]
		if len(q.waiting) == 0 {
			delete(f.queues, key)
			if f.idle != nil {
				f.idle(key)
			}
			f.mu.Unlock()
			return
		}
		it := q.waiting[0]
		var zero T
		q.waiting[0] = zero
		q.waiting = q.waiting[1:]
		if f.take != nil {
			f.take(key, it)
		}
		f.mu.Unlock()

		f.run(key, it)
	}
}
