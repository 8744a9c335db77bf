// Package supervisor is the pool that maps chat keys to warm codex app-server children.
//
// Each chat key gets one child, spawned on its first message, that resumes the key's stored
// thread (or starts one). Turns of one key run one at a time in arrival order; different keys run
// in parallel up to a cap on live children and a memory budget on their summed PSS (slots.go).
// Watchdogs retire children that hang or die, and recycling retires children that grew too
// large or old (memory.go); the next message of that key gets a new child that resumes the same
// thread.
//
// The parts. Supervisor composes them, answers the API by delegating to them, and keeps what
// spans them: New, Shutdown and the handover's steps (Freeze, Thaw, adopting handed children).
//   - the pool (pool: pool.go, session.go, state.go, slots.go, spares.go, warmup.go, memory.go,
//     shared.go, watcher.go, sweep.go, restart.go, status.go): the sessions and their states,
//     the slots, the spares, the memory sampler and recycling, children.json, the restart
//     backoff; it asks the chats through two hooks wired in New (a chat's queue length,
//     forgetting an idle key).
//   - the chats (chats: key.go, queue.go, busy.go, turn.go, control.go, compact.go,
//     activity.go): the keys, their queues and workers, the busy policy, a turn's run, /stop,
//     /new, /status, the long-thread policy; it takes and runs children through the pool.
//   - the handover (freeze, handover.go): a reload's freeze, the children it paused, the turns
//     it handed over.
//   - the account (package account) and the shared children (package hosts), each part with
//     its own lock; what a turn is doing (package progress).
//   - the retention sweep (archiver, retention.go): its own lock and loop; it reaches the pool
//     and a chat's worker through hooks wired in New.
//   - the approvals (approvalBoard, approval.go) and a turn's watchdogs (turnWatch,
//     turnwatch.go), each with its own lock.
//
// owners_test.go checks that each same-package part's fields are touched only from its files.
//
// Concurrency layout: one mutex (Supervisor.mu) guards the pool, the chats and the freeze (the
// keyfifo runs on it too); each says "guarded by Supervisor.mu" and holds a pointer to it. They
// stay under one lock because decisions span them: an eviction picks an idle child whose key
// has nothing queued, a key is forgotten only with no queue, child or backoff, a freeze waits
// for every key and session to be quiet.
// The mutex is never held across a call into a child, the thread store, the spawn function or
// /proc. Every chat key with queued work has one worker goroutine (queue.go) that runs its turns
// in FIFO order; Shutdown waits for them before closing the children. Every child has one
// watcher goroutine (watcher.go) that notices its death, closes it when idle too long, and is
// the only caller of Close; it exits once the child was reaped. One memory sampler goroutine
// (memory.go) reads the children's memory for the budget and recycles bloated children; it stops
// when Shutdown begins. The watchers, the sampler and the retention loop are counted in a
// WaitGroup that Shutdown waits for last.
//
// Lock order: a goroutine holding a lock may take only locks later in this list, never an
// earlier one:
//  1. archiver.sweepMu (held for a whole sweep, which takes slots and runs on chats' workers)
//  2. childRecords.mu (the pool's: a write of children.json reads the pool under it)
//  3. Supervisor.mu (the pool, the chats, the freeze)
//  4. the parts' own locks, taken with or without Supervisor.mu; none of them is held while
//     Supervisor.mu or a lock above is taken: liveTurn.mu, approvalBoard.mu, turnWatch.mu,
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

	mu           sync.Mutex
	chats        *chats      // the chats' keys, queues and turns (key.go, queue.go, turn.go, …)
	streak       crashStreak // crashes since a turn last completed (crashstreak.go)
	shutdownDone chan struct{}

	approvals *approvalBoard // approvals waiting for the chat's answer (approval.go)

	handover freeze // a reload's freeze and the turns it handed over (handover.go)
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
		approvals:    newApprovalBoard(),
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
			return func() {
				s.mu.Lock()
				s.pool.releaseSlotLocked()
				s.mu.Unlock()
			}, nil
		}, func(ctx context.Context, chatKey string, fn func(k *keyState, retire func()) error) (bool, error) {
			return s.chats.onWorker(ctx, chatKey, fn)
		})
	s.pool = newPool(poolDeps{cfg: &s.cfg, log: s.log, mu: &s.mu, wg: &s.wg, accepting: s.accepting, hosts: s.hosts,
		archive: s.archive, handover: &s.handover, streak: &s.streak,
		queued: func(key string) int { return s.chats.queuedLocked(key) }, forget: func(k *keyState) { s.chats.gcKeyLocked(k) }})
	s.chats = newChats(chatsDeps{cfg: &s.cfg, log: s.log, mu: &s.mu, life: s.life, pool: s.pool, handover: &s.handover,
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
	s.adopt(cfg.Adopted)
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
	s.mu.Lock()
	if s.pool.closedLocked() {
		s.mu.Unlock()
		select {
		case <-s.shutdownDone:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	running := s.pool.closeLocked()
	s.limits.Stop()
	queued := s.chats.closeLocked()
	s.mu.Unlock()
	s.stopAccepting(ErrClosed)
	for _, j := range queued {
		j.done <- outcome{reply: Reply{}, err: ErrClosed}
	}
	s.log.Info("shutting down", zap.Int("children", running), zap.Int("queued_dropped", len(queued)))

	drained := make(chan struct{})
	go func() { // owned here: both paths below wait for it
		s.chats.wait()
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
	s.mu.Lock()
	reaped := s.pool.retireAllLocked(ReasonShutdown)
	s.mu.Unlock()
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
