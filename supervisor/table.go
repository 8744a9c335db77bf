package supervisor

import (
	"sync"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/keyfifo"
	"github.com/molecule-ai/codex-warm/supervisor/hosts"
	"github.com/molecule-ai/codex-warm/supervisor/slots"
)

// stateTable is the supervisor's one state table under its one lock: the shape of x/tools'
// jsonrpc2 (v2), whose in-flight state lives in one struct changed through one update function.
// The state (table) is reachable only inside do, with the lock held: every transition is a
// method of table, and the slow work (spawning, turns, waiting for a slot or a reaping, I/O)
// runs outside it, in the pool, the chats and the handover, which report back through do.
//
// The keys, sessions, slots, queues and the freeze are one table, not parts with locks of their
// own, because the decisions span them: an eviction picks an idle child whose key has nothing
// queued, a key is forgotten only with no queue, child or backoff, a freeze waits for every
// key and session to be quiet. Split, each of those would take two locks or decide on a stale
// view.
type stateTable struct {
	mu sync.Mutex
	t  *table
}

// newStateTable builds the table; run is what a chat's worker runs for each of its jobs (the
// chats' work), outside the lock.
func newStateTable(d tableDeps, run func(chatKey string, j *job)) *stateTable {
	st := &stateTable{}
	st.t = newTable(d, &st.mu, run)
	return st
}

// newTable builds the state; mu is its lock, which its queues' keyfifo runs on: it calls take
// and keyIdle with it held, as stateTable.do calls its callers' functions.
func newTable(d tableDeps, mu *sync.Mutex, run func(chatKey string, j *job)) *table {
	t := &table{tableDeps: d, sessions: make(map[*session]struct{}), retired: make(map[string]int),
		keys:   make(map[string]*keyState),
		slots:  slots.New(d.cfg.MaxChildren*d.cfg.ThreadsPerChild, d.cfg.MaxSlotWaiters, d.cfg.MemoryBudget),
		spares: newSpareState()}
	t.queue = keyfifo.New(keyfifo.Config[*job]{Run: run, Take: t.take, Idle: t.keyIdle, Lock: mu})
	return t
}

// do runs fn on the table with its lock held. fn must not block: no call into a child, the
// thread store, the spawn function or /proc, and no wait on a channel another holder of the
// lock would close.
func (st *stateTable) do(fn func(t *table)) {
	st.mu.Lock()
	defer st.mu.Unlock()
	fn(st.t)
}

// waitWorkers returns once every chat's worker exited (Shutdown). It holds no lock.
func (st *stateTable) waitWorkers() { st.t.queue.Wait() }

// table is the state: the pool's sessions and their states, slots and spares' signals and
// counters, the chats' keys and queues and their stop marks, and the handover's freeze. Only
// its own methods change its fields (owners_test.go); they run with stateTable.mu held, which
// is why none of them says "Locked": a *table is only ever had inside stateTable.do (or in a
// keyfifo hook, which runs under the same lock).
type table struct {
	tableDeps

	// the pool's
	closed        bool
	sessions      map[*session]struct{} // children not yet dead
	slots         slots.Slots
	spares        spareState
	retired       map[string]int
	turns         int64
	storeErrors   int64
	restarts      int64 // children started after a watchdog or failure ended their key's last one
	crashBackoffs int64 // crashes that started a restart backoff, of keys and of spares
	nextID        uint64
	useSeq        uint64
	streak        crashStreak // the crashes since a turn last completed

	// the chats'
	keys  map[string]*keyState
	queue *keyfifo.FIFO[*job] // per chat key: the jobs waiting, and the key's worker
	stops stopMarks           // when each chat last asked to stop (control.go)

	// the handover's
	freeze freeze // a reload's freeze and the turns it handed over (freeze.go)
}

// tableDeps is what the table is handed: configuration, and the signals it sends to the slow
// parts (each returns at once).
type tableDeps struct {
	cfg   *Config
	log   *zap.Logger
	hosts *hosts.Pool // the shared children; nil with a child per chat
	// kickSpares wakes the spares' keeper; drainTimer starts the wait after which a draining
	// shared child's running turns are interrupted.
	kickSpares func()
	drainTimer func(h *hosts.Host)
}

// storeFailed counts a failed write of a thread id to the ThreadStore.
func (t *table) storeFailed() { t.storeErrors++ }

// shutDown reports whether Shutdown began.
func (t *table) shutDown() bool { return t.closed }

// crashes is the pool's crash streak (Supervisor.Crashes).
func (t *table) crashes() CrashStreak { return t.streak.now() }
