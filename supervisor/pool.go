package supervisor

import (
	"context"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/supervisor/hosts"
)

// pool is the children: the sessions (a chat's or a spare's thread in a child) and their
// states, the slots they hold (slots.go), the spares (spares.go), the memory sampler and
// recycling (memory.go), children.json (sweep.go), the watchers (watcher.go), the restart
// backoff's accounting (restart.go, state.go) and a session's opening (session.go).
//
// It is guarded by Supervisor.mu (mu points at it), as the chats' keys and queues are: an
// eviction picks an idle child whose chat has nothing queued, a key is forgotten only with no
// queue, child or backoff, and those decisions change both sides in one critical section. The
// pool asks the chat side through two hooks the Supervisor wires in New (queued, forget), both
// called with mu held. Its fields are touched only in its files (owners_test.go).
type pool struct {
	poolDeps // what it is handed; the rest is its own state

	closed        bool
	sessions      map[*session]struct{} // children not yet dead
	slots         slots
	spares        spareState
	records       childRecords // what children.json holds besides the live children
	retired       map[string]int
	turns         int64
	storeErrors   int64
	restarts      int64 // children started after a watchdog or failure ended their key's last one
	crashBackoffs int64 // crashes that started a restart backoff, of keys and of spares
	nextID        uint64
	useSeq        uint64
	warmUpFailed  atomic.Bool // a spare's warm-up failed and was logged (warmup.go)
}

// poolDeps is what New hands the pool: the Supervisor's config, lock and goroutines, and the
// parts the pool asks.
type poolDeps struct {
	cfg       *Config
	log       *zap.Logger
	mu        *sync.Mutex     // Supervisor.mu
	wg        *sync.WaitGroup // Supervisor.wg: the watchers, the sampler, a draining host's timer
	accepting context.Context // cancelled when Shutdown begins
	hosts     *hosts.Pool     // the shared children; nil with a child per chat
	archive   *archiver       // told of the threads a chat leaves, asked for one it returns to
	handover  *freeze         // woken by every state change; no spare starts while it is active
	streak    *crashStreak    // the crashes since a turn last completed

	// queued is the number of messages of a chat waiting in its queue; forget drops a key with
	// no work, no child and no backoff. Both run with mu held.
	queued func(key string) int
	forget func(k *keyState)
}

func newPool(d poolDeps) *pool {
	return &pool{poolDeps: d, sessions: make(map[*session]struct{}), retired: make(map[string]int),
		slots:  newSlots(d.cfg.MaxChildren*d.cfg.ThreadsPerChild, d.cfg.MaxSlotWaiters, d.cfg.MemoryBudget),
		spares: newSpareState()}
}

// closeLocked marks the pool closed: slot waiters get ErrClosed, no child or spare starts. It
// returns the number of live sessions.
func (p *pool) closeLocked() int {
	p.closed = true
	p.slots.fail(ErrClosed)
	return len(p.sessions)
}

// closedLocked reports whether Shutdown began.
func (p *pool) closedLocked() bool { return p.closed }

// retireAllLocked retires every session (Shutdown) and returns what to wait on for their reaping.
func (p *pool) retireAllLocked(reason string) []chan struct{} {
	var reaped []chan struct{}
	for sess := range p.sessions {
		p.retireLocked(sess, reason, nil)
		reaped = append(reaped, sess.reaped)
	}
	return reaped
}

// eachLocked calls fn for every live session.
func (p *pool) eachLocked(fn func(*session)) {
	for sess := range p.sessions {
		fn(sess)
	}
}

// takeSlotLocked holds a free slot for a child handed over by a reload, false when none is free.
func (p *pool) takeSlotLocked() bool { return p.slots.take(p.memUseLocked()) }

// startWatcher starts sess's watcher, which closes and reaps its child at its end.
func (p *pool) startWatcher(sess *session) {
	p.wg.Add(1)
	go p.watch(sess)
}
