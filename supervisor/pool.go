package supervisor

import (
	"context"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/supervisor/hosts"
)

// pool is the children's slow work: spawning a session and opening its thread (session.go),
// waiting for a slot (slots.go), the spares' keeper (spares.go, warmup.go), the memory sampler
// (memory.go), children.json (sweep.go), the watchers (watcher.go), a draining shared child's
// timer (shared.go) and the status table's rows (status.go). What it decides it decides in the
// state table (table.go), through stateTable.do; its own fields are the children record and
// the spares' keeper's signals.
type pool struct {
	poolDeps // what it is handed; the rest is its own state

	records      childRecords // what children.json holds besides the live children
	keeper       spareKeeper  // the spares' keeper's signals (spares.go)
	warmUpFailed atomic.Bool  // a spare's warm-up failed and was logged (warmup.go)
}

// poolDeps is what New hands the pool: the Supervisor's config, state table and goroutines, and
// the parts the pool asks.
type poolDeps struct {
	cfg       *Config
	log       *zap.Logger
	st        *stateTable
	wg        *sync.WaitGroup // Supervisor.wg: the watchers, the sampler, a draining host's timer
	accepting context.Context // cancelled when Shutdown begins
	hosts     *hosts.Pool     // the shared children; nil with a child per chat
	archive   *archiver       // told of the threads a chat leaves, asked for one it returns to
}

func newPool(d poolDeps) *pool {
	return &pool{poolDeps: d, keeper: newSpareKeeper()}
}

// close marks the table closed (Shutdown): slot waiters get ErrClosed, no child or spare
// starts, and every job waiting in a queue is taken out (its caller gets ErrClosed). It returns
// the number of live sessions and those jobs. A turn the previous image handed over stays: it
// runs in its child already, and the message given again attaches to it even now (admit), so
// the drain lets it run to its end like any running turn. Every chat with a queue has its key
// here (gcKey keeps a busy one).
func (t *table) close() (int, []*job) {
	t.closed = true
	t.slots.Fail(ErrClosed)
	var out []*job
	for key := range t.keys {
		out = append(out, t.queue.RemoveAllLocked(key, func(j *job) bool { return !j.opts.resume })...)
	}
	return len(t.sessions), out
}

// retireAll retires every session (Shutdown) and returns what to wait on for their reaping.
func (t *table) retireAll(reason string) []chan struct{} {
	var reaped []chan struct{}
	for sess := range t.sessions {
		t.retire(sess, reason, nil)
		reaped = append(reaped, sess.reaped)
	}
	return reaped
}

// each calls fn for every live session.
func (t *table) each(fn func(*session)) {
	for sess := range t.sessions {
		fn(sess)
	}
}

// takeSlot holds a free slot for a child handed over by a reload, false when none is free.
func (t *table) takeSlot() bool { return t.slots.Take(t.memory()) }

// startWatcher starts sess's watcher, which closes and reaps its child at its end.
func (p *pool) startWatcher(sess *session) {
	p.wg.Add(1)
	go p.watch(sess)
}
