// Package supervisor is the pool that maps chat keys to warm codex app-server children.
//
// Each chat key gets one child, spawned on its first message, that resumes the key's stored
// thread (or starts one). Turns of one key run one at a time in arrival order; different keys run
// in parallel up to a cap on live children and a memory budget on their summed PSS (package slots).
// Watchdogs retire children that hang or die, and recycling retires children that grew too
// large or old (memory.go); the next message of that key gets a new child that resumes the same
// thread.
//
// The shape: one state table. The keys, the sessions and their states, the slots, the queues,
// the spares' signals and counters, the crash streak and the reload's freeze are one type,
// table (table.go), under one lock, stateTable.mu; a *table is only had inside stateTable.do,
// and every transition is a method of table (the ones that decide the handover are in
// freeze.go, the adoption's in adopt.go; others sit beside the slow work they serve). The slow
// work runs outside the lock, in parts that keep their own few fields and report back through
// do, as x/tools' jsonrpc2 (v2) keeps its in-flight state in one struct changed through one
// update function:
//   - the pool (pool: pool.go, session.go, slots.go, spares.go, warmup.go, memory.go, shared.go,
//     watcher.go, sweep.go, status.go): spawning a child and opening its thread, waiting for a
//     slot, the spares' keeper, the memory sampler, children.json, the watchers, the status
//     table's rows.
//   - the chats (chats: key.go, queue.go, busy.go, turn.go, control.go, compact.go,
//     activity.go): a message's way into its chat's queue and worker, the busy policy, a turn's
//     run (its options are one struct, turnOptions), /stop, /new and /status, the long-thread
//     policy; a command that acts on a thread runs as a job on the chat's worker (command,
//     threadJob: /new today).
//   - the handover (handover: handover.go, adopt.go): Freeze, Thaw and the adoption of the
//     children a previous image handed over; it changes the table through its methods.
//   - the retention sweep (archiver, retention.go): its own lock and loop; it reaches the pool
//     and a chat's worker through hooks wired in New.
//   - the approvals (package approvals, asked through approval.go), a turn's watchdogs
//     (package turnwatch) and a running turn (liveTurn, busy.go), each with its own lock;
//     the slots' cap, budget and waiters (package slots), kept in the table.
//   - the account (package account) and the shared children (package hosts), each part with
//     its own lock; what a turn is doing (package progress).
//
// Supervisor composes them: New, Shutdown, and the API, each method delegating to a part.
//
// Why one table and not parts with locks of their own: the decisions span them. An eviction
// picks an idle child whose chat has nothing queued; a key is forgotten only with no queue, no
// child and no backoff; a freeze waits for every key and session to be quiet. Split, each of
// those would take two locks in some order or decide on a stale view.
//
// owners_test.go holds the rules: a part's fields are written only by its own methods and
// constructors (the table's by table's), nothing but stateTable's methods touches the table
// around do, and no type calls another type's …Locked method.
//
// The lock rule: stateTable.mu is held only inside stateTable.do (and by the keyfifo of the
// chats' queues, which runs on it and calls the table's take and keyIdle with it held). A
// function given to do must not block: it is never held across a call into a child, the thread
// store, the spawn function or /proc, nor a wait on a channel. Every chat key with queued work
// has one worker goroutine (internal/keyfifo) that runs its jobs in FIFO order; Shutdown waits
// for them before closing the children. Every child has one watcher goroutine (watcher.go) that
// notices its death, closes it when idle too long, and is the only caller of Close; it exits
// once the child was reaped. One memory sampler goroutine (memory.go) reads the children's
// memory for the budget and recycles bloated children; it stops when Shutdown begins. The
// watchers, the sampler, a draining shared child's timer and the retention loop are counted in
// a WaitGroup that Shutdown waits for last.
//
// Lock order: a goroutine holding a lock may take only locks later in this list, never an
// earlier one:
//  1. archiver.sweepMu (held for a whole sweep, which takes slots and runs on chats' workers)
//  2. childRecords.mu (the pool's: a write of children.json reads the table under it)
//  3. stateTable.mu (the table: keys, sessions, slots, queues, freeze)
//  4. the parts' own locks, taken with or without stateTable.mu; none of them is held while
//     stateTable.mu or a lock above is taken: liveTurn.mu, approvals.Board's, turnwatch.Watch's,
//     progress.Activity's lock (the status table reads a running turn's activity under it),
//     hosts.Pool's lock (it never calls the supervisor while holding it: OnDrain runs without
//     it), and package account's locks (Model, Limits, Usage: Usage.writeMu before Usage.mu).
package supervisor

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/supervisor/account"
	"github.com/molecule-ai/codex-warm/supervisor/approvals"
	"github.com/molecule-ai/codex-warm/supervisor/hosts"
)

// Supervisor is the pool of warm codex children, one per chat key. Its methods are safe for
// concurrent use.
type Supervisor struct {
	cfg Config
	log *zap.Logger

	// accepting is cancelled (cause ErrClosed) when Shutdown starts: slot waits, spawns and
	// thread setup stop. life is cancelled when the drain deadline passes: running turns are
	// interrupted.
	accepting     context.Context
	stopAccepting context.CancelCauseFunc
	life          context.Context
	stopLife      context.CancelCauseFunc

	wg sync.WaitGroup // the child watchers, the memory sampler and the retention sweep

	archive *archiver // the retention sweep, leaving and returning chats' threads (retention.go)

	pool  *pool       // the children: sessions, slots, spares, memory, records (pool.go)
	hosts *hosts.Pool // the shared children, when ThreadsPerChild > 1; nil otherwise

	model  *account.Model  // whether the model could be reached, across every chat
	limits *account.Limits // the account's usage limits, and the work parked until their reset
	usage  *account.Usage  // each chat's token usage

	overloadRetries atomic.Int64 // requests children retried after codex refused them as overloaded

	st           *stateTable // the one state table: keys, sessions, slots, queues, freeze (table.go)
	chats        *chats      // a chat's way: its messages, turns and commands (key.go, queue.go, turn.go, …)
	shutdownDone chan struct{}

	approvals *approvals.Board // approvals waiting for the chat's answer

	handover *handover // a reload's freeze and thaw, and the adoption of handed-over children (handover.go)
}

// New builds a Supervisor. When cfg.StateDir is set it first sweeps children left by a daemon
// that died (see SweepOrphans); that can take up to about 2×SweepGrace.
func New(cfg Config) (*Supervisor, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	var budgetErr error
	if cfg.MemoryBudget == 0 {
		if cfg.MemoryBudget, budgetErr = DefaultMemoryBudget(); budgetErr != nil {
			cfg.MemoryBudget = -1 // no /proc/meminfo (not Linux): warned about below
		}
	}
	s := &Supervisor{
		cfg:          cfg,
		log:          cfg.Logger.Named("supervisor"),
		shutdownDone: make(chan struct{}),
		approvals:    approvals.New(),
		model:        account.NewModel(),
		limits:       account.NewLimits(cfg.StateDir, cfg.ResumeSpacing, cfg.Logger.Named("supervisor")),
		usage:        account.NewUsage(cfg.StateDir, cfg.Logger.Named("supervisor")),
	}
	s.accepting, s.stopAccepting = context.WithCancelCause(context.Background())
	s.life, s.stopLife = context.WithCancelCause(context.Background())
	if s.cfg.Spawn == nil {
		s.cfg.Spawn = appServerSpawn(cfg.AppServer, cfg.HandshakeTimeout, cfg.Logger,
			func(string) { s.overloadRetries.Add(1) })
	}
	if cfg.ThreadsPerChild > 1 {
		s.hosts = hosts.New(hosts.Config{PerChild: cfg.ThreadsPerChild, Spawn: s.cfg.Spawn, Log: s.log,
			UnloadTimeout: hostUnloadTimeout, Drain: cfg.HostDrain, OnDrain: func(h *hosts.Host) { s.pool.onHostDrain(h) }})
	}
	s.archive = newArchiver(&s.cfg, s.log, s.usage,
		func(ctx context.Context) (func(), error) {
			if err := s.pool.acquireSlot(ctx); err != nil {
				return nil, err
			}
			return func() { s.st.do(func(t *table) { t.releaseSlot() }) }, nil
		}, func(ctx context.Context, chatKey string, fn func(k *keyState, retire func()) error) (bool, error) {
			return s.chats.onWorker(ctx, chatKey, fn)
		})
	s.st = newStateTable(tableDeps{cfg: &s.cfg, log: s.log, hosts: s.hosts,
		kickSpares: func() { s.pool.kickSpares() }, drainTimer: func(h *hosts.Host) { s.pool.drainTimer(h) }},
		func(_ string, j *job) { s.chats.work(j) })
	s.pool = newPool(poolDeps{cfg: &s.cfg, log: s.log, st: s.st, wg: &s.wg, accepting: s.accepting, hosts: s.hosts,
		archive: s.archive})
	s.handover = newHandover(handoverDeps{log: s.log, st: s.st, pool: s.pool, hosts: s.hosts, approvals: s.approvals})
	s.chats = newChats(chatsDeps{cfg: &s.cfg, log: s.log, st: s.st, life: s.life, pool: s.pool,
		approvals: s.approvals, archive: s.archive, model: s.model, limits: s.limits, usage: s.usage})
	if cfg.Jobs != nil {
		cfg.Jobs.Bind(s.chats.runJob)
	}
	if cfg.StateDir != "" {
		if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
			return nil, fmt.Errorf("supervisor: state dir: %w", err)
		}
		s.pool.bootSweep(cfg.Adopted)
	}
	s.handover.adopt(cfg.Adopted)
	if cfg.StateDir != "" {
		if err := s.pool.writeRecords(); err != nil {
			return nil, fmt.Errorf("supervisor: %w", err)
		}
	}
	if cfg.MemorySampleInterval > 0 {
		s.wg.Add(1)
		go s.pool.sampleMemory()
	}
	if cfg.Retention != nil && cfg.RetentionPolicy.Any() {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.archive.retentionLoop(s.accepting)
		}()
	}
	s.pool.startSpares()
	if budgetErr != nil {
		s.log.Warn("no memory budget: live children are bounded by max_children alone",
			zap.Int("max_children", cfg.MaxChildren), zap.Error(budgetErr))
	}
	s.log.Info("supervisor ready",
		zap.Int("max_children", cfg.MaxChildren), zap.Int("threads_per_child", cfg.ThreadsPerChild), zap.Int("spares", cfg.Spares), zap.Int64("memory_budget_bytes", max(cfg.MemoryBudget, 0)),
		zap.Int64("child_memory_limit_bytes", cfg.ChildMemoryLimit), zap.Duration("child_max_age", cfg.ChildMaxAge),
		zap.Int("child_max_turns", cfg.ChildMaxTurns), zap.Int("max_queue_per_key", cfg.MaxQueuePerKey),
		zap.Duration("idle_ttl", cfg.IdleTTL), zap.Duration("turn_deadline", cfg.TurnDeadline),
		zap.Duration("post_tool_quiet", cfg.PostToolQuiet), zap.String("state_dir", cfg.StateDir))
	return s, nil
}

// Shutdown stops taking work (Submit returns ErrClosed; messages still queued get ErrClosed,
// but a turn the previous image handed over runs on for the message that attaches to it),
// lets running turns finish until ctx is done, then interrupts the rest, closes every child and
// waits for all of them and for every supervisor goroutine. It returns an error wrapping ctx's
// cause when turns had to be interrupted. Calling it again waits for the first call to finish.
func (s *Supervisor) Shutdown(ctx context.Context) error {
	var already bool
	var running int
	var queued []*job
	s.st.do(func(t *table) {
		if already = t.shutDown(); already {
			return
		}
		running, queued = t.close()
		s.limits.Stop()
	})
	if already {
		select {
		case <-s.shutdownDone:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	s.stopAccepting(ErrClosed)
	for _, j := range queued {
		j.done <- outcome{reply: Reply{}, err: ErrClosed}
	}
	s.log.Info("shutting down", zap.Int("children", running), zap.Int("queued_dropped", len(queued)))

	drained := make(chan struct{})
	go func() { // owned here: both paths below wait for it
		s.st.waitWorkers()
		close(drained)
	}()
	var err error
	select {
	case <-drained:
	case <-ctx.Done():
		err = fmt.Errorf("supervisor: drain: turns interrupted: %w", context.Cause(ctx))
		s.log.Warn("drain deadline passed; interrupting running turns")
		s.stopLife(ErrClosed)
		<-drained
	}

	<-s.pool.sparesStopped() // no spare starts after this
	var reaped []chan struct{}
	s.st.do(func(t *table) { reaped = t.retireAll(ReasonShutdown) })
	for _, r := range reaped {
		<-r
	}
	s.stopLife(ErrClosed)
	s.wg.Wait()
	s.usage.Close() // no turn runs any more
	if werr := s.pool.writeRecords(); werr != nil {
		s.log.Error("writing children record failed", zap.Error(werr))
	}
	s.log.Info("shut down")
	close(s.shutdownDone)
	return err
}
