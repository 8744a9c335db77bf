// Package supervisor is the pool that maps chat keys to warm codex app-server children.
//
// Each chat key gets one child, spawned on its first message, that resumes the key's stored
// thread (or starts one). Turns of one key run one at a time in arrival order; different keys run
// in parallel up to a cap on live children. Watchdogs retire children that hang or die; the next
// message of that key gets a new child that resumes the same thread.
//
// Concurrency layout: one mutex (Supervisor.mu) guards the pool's bookkeeping; it is never held
// across a call into a child, the thread store, the spawn function or /proc. Every chat key with queued work has one worker goroutine
// that runs its turns in FIFO order. Every child has one watcher goroutine that notices its death,
// closes it when idle too long, and is the only caller of Close; it exits once the child was
// reaped. Both kinds are counted in one WaitGroup that Shutdown waits for.
package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/childproc"
	"github.com/molecule-ai/codex-warm/projector"
	"github.com/molecule-ai/codex-warm/protocol"
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

	wg      sync.WaitGroup // every goroutine the supervisor starts
	workers sync.WaitGroup // the key workers (also counted in wg); the drain waits for them

	recMu    sync.Mutex         // serializes children.json writes so the last write is the newest
	leftover []childproc.Record // orphans the boot sweep could not kill; kept for the next sweep
	bootID   string             // this boot's id, written to children.json beside the start times

	mu           sync.Mutex
	closed       bool
	keys         map[string]*keyState
	sessions     map[*session]struct{} // children not yet dead
	used         int                   // slots held: one per session, plus grants in hand
	waiters      []*slotWaiter         // FIFO of chat keys waiting for a slot
	retiring     int                   // sessions in StateRetiring: each will free a slot
	turns        int64
	retired      map[string]int
	storeErrors  int64
	nextID       uint64
	useSeq       uint64
	shutdownDone chan struct{}
}

// keyState is the per chat key bookkeeping. It lives while the key has work, a child, or a
// pending crash backoff.
type keyState struct {
	key     string
	queue   []*job // waiting, FIFO; the running job is not in it
	working bool   // a worker goroutine owns the key
	sess    *session

	restarts    int  // children started after a watchdog retirement or failed start
	needRestart bool // the next spawn is a restart

	failures int // consecutive crashes
	bo       *backoff.ExponentialBackOff
	retryAt  time.Time
	lastErr  error
}

type job struct {
	ctx  context.Context
	text string
	done chan outcome // buffered: the worker never blocks on a caller that left
}

type outcome struct {
	reply Reply
	err   error
}

type slotWaiter struct {
	ready   chan struct{} // closed with granted or err set
	granted bool
	err     error
}

// session is one child and its thread. Fields written after creation are written under
// Supervisor.mu; the key's worker also reads child, threadID and the first-turn flags without
// it, being their only writer.
type session struct {
	id    uint64
	key   *keyState
	log   *zap.Logger
	child Child
	pid   int
	proc  childproc.Identity

	state    State
	reason   string // why it is retiring
	cause    error
	threadID string

	newThread    bool
	resumeFailed bool
	recorded     bool // the thread id is in the store

	started   time.Time
	turnStart time.Time
	lastUsed  time.Time // for the idle TTL
	useSeq    uint64    // for LRU: a counter, because clock readings tie (and do under synctest)
	ready     bool      // reached StateIdle once: its thread was opened
	turns     int       // turns run, whatever their outcome
	completed int       // turns that reached turn/completed without error
	restarts  int

	retireCh chan struct{} // closed on → retiring: tells the watcher to close the child
	reaped   chan struct{} // closed on → dead: the child was waited for
	kick     chan struct{} // the session went idle: the watcher re-arms its idle timer
}

// tripError is the cancel cause of a turn ended by a watchdog.
type tripError struct {
	watchdog string
	after    time.Duration
}

func (e *tripError) Error() string {
	return fmt.Sprintf("watchdog %s tripped after %s", e.watchdog, e.after)
}

// handshakeCause is the cancel cause of a spawn or thread setup that took too long. It wraps
// appserver.ErrHandshakeTimeout so callers match one sentinel whichever side timed out first.
func handshakeCause(d time.Duration) error {
	return fmt.Errorf("%w: no answer within %s", appserver.ErrHandshakeTimeout, d)
}

// New builds a Supervisor. When cfg.StateDir is set it first sweeps children left by a daemon
// that died (see SweepOrphans); that can take up to about 2×SweepGrace.
func New(cfg Config) (*Supervisor, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Supervisor{
		cfg:          cfg,
		log:          cfg.Logger.Named("supervisor"),
		keys:         make(map[string]*keyState),
		sessions:     make(map[*session]struct{}),
		retired:      make(map[string]int),
		shutdownDone: make(chan struct{}),
	}
	s.accepting, s.stopAccepting = context.WithCancelCause(context.Background())
	s.life, s.stopLife = context.WithCancelCause(context.Background())
	if cfg.StateDir != "" {
		if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
			return nil, fmt.Errorf("supervisor: state dir: %w", err)
		}
		s.bootID = childproc.ProcFS{}.BootID()
		ctx, cancel := context.WithTimeout(context.Background(), 3*cfg.SweepGrace+time.Second)
		swept, err := SweepOrphans(ctx, cfg.StateDir, cfg.SweepGrace, s.log)
		cancel()
		if err != nil {
			// Not fatal: a daemon that cannot read its old record still serves; the record is
			// rewritten below and the error says what was lost.
			s.log.Error("boot sweep failed", zap.Error(err))
		}
		for _, sc := range swept {
			if sc.Action == childproc.SweepSurvived {
				s.leftover = append(s.leftover, sc.Record)
			}
		}
		if err := s.writeRecords(); err != nil {
			return nil, fmt.Errorf("supervisor: %w", err)
		}
	}
	s.log.Info("supervisor ready",
		zap.Int("max_children", cfg.MaxChildren), zap.Int("max_queue_per_key", cfg.MaxQueuePerKey),
		zap.Duration("idle_ttl", cfg.IdleTTL), zap.Duration("turn_deadline", cfg.TurnDeadline),
		zap.Duration("post_tool_quiet", cfg.PostToolQuiet), zap.String("state_dir", cfg.StateDir))
	return s, nil
}

// Submit runs text as the next turn of chatKey's conversation and returns its reply.
//
// Turns of one chat key run one at a time in the order Submit was called; Submit waits its turn.
// When ctx is done while the message waits, it leaves the queue without running; when ctx is done
// while its turn runs, the turn is interrupted. Either way Submit returns at once with ctx's
// cause.
//
// Errors: Config.Admit's (wrapped), ErrQueueFull, ErrClosed, ErrNoSlot (wrapped),
// *CrashLoopError, *WatchdogError (the turn was ended by a watchdog; the returned Reply holds what
// the turn produced, if anything), or a wrapped spawn/turn error. A turn that codex itself
// reports as failed is not an error: see Reply.Status and Reply.Error.
func (s *Supervisor) Submit(ctx context.Context, chatKey string, text string) (Reply, error) {
	none := Reply{ChatKey: chatKey}
	if ctx.Err() != nil {
		return none, fmt.Errorf("chat %s: %w", chatKey, context.Cause(ctx))
	}
	if s.cfg.Admit != nil {
		if err := s.cfg.Admit(ctx, chatKey); err != nil {
			return none, fmt.Errorf("chat %s: %w", chatKey, err)
		}
	}
	j := &job{ctx: ctx, text: text, done: make(chan outcome, 1)}

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return none, ErrClosed
	}
	k := s.keys[chatKey]
	if k == nil {
		k = &keyState{key: chatKey}
		s.keys[chatKey] = k
	}
	if len(k.queue) >= s.cfg.MaxQueuePerKey {
		n := len(k.queue)
		s.mu.Unlock()
		return none, fmt.Errorf("chat %s: %d messages waiting: %w", chatKey, n, ErrQueueFull)
	}
	k.queue = append(k.queue, j)
	if !k.working {
		k.working = true
		s.wg.Add(1)
		s.workers.Add(1)
		go s.work(k)
	}
	s.mu.Unlock()

	select {
	case o := <-j.done:
		return o.reply, o.err
	case <-ctx.Done():
	}
	s.mu.Lock()
	for i, q := range k.queue {
		if q == j {
			k.queue = append(k.queue[:i], k.queue[i+1:]...)
			break
		}
	}
	s.gcKeyLocked(k)
	s.mu.Unlock()
	// The job may have finished in the meantime; prefer its answer.
	select {
	case o := <-j.done:
		return o.reply, o.err
	default:
	}
	return none, fmt.Errorf("chat %s: %w", chatKey, context.Cause(ctx))
}

// work is the chat key's worker: it runs the key's queued jobs one at a time and exits when the
// queue is empty.
func (s *Supervisor) work(k *keyState) {
	defer s.wg.Done()
	defer s.workers.Done()
	for {
		s.mu.Lock()
		if len(k.queue) == 0 {
			k.working = false
			s.gcKeyLocked(k)
			s.mu.Unlock()
			return
		}
		j := k.queue[0]
		k.queue[0] = nil
		k.queue = k.queue[1:]
		s.mu.Unlock()

		r, err := s.run(k, j)
		r.ChatKey = k.key
		j.done <- outcome{reply: r, err: err}
	}
}

func (s *Supervisor) run(k *keyState, j *job) (Reply, error) {
	if j.ctx.Err() != nil {
		return Reply{}, fmt.Errorf("chat %s: %w", k.key, context.Cause(j.ctx))
	}
	sess, err := s.acquire(k, j)
	if err != nil {
		return Reply{}, err
	}
	return s.turn(k, sess, j)
}

// sleep waits d, or until ctx is done or the supervisor stops accepting work.
func (s *Supervisor) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-s.accepting.Done():
		return ErrClosed
	}
}

// acquire returns the key's session in StateBusy, starting a child when the key has none.
func (s *Supervisor) acquire(k *keyState, j *job) (*session, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, ErrClosed
		}
		sess := k.sess
		switch {
		case sess == nil:
			if wait := time.Until(k.retryAt); k.failures > 0 && wait > 0 {
				if k.failures >= s.cfg.CrashLoopAfter {
					e := &CrashLoopError{ChatKey: k.key, Failures: k.failures, RetryAt: k.retryAt, Err: k.lastErr}
					s.mu.Unlock()
					return nil, e
				}
				// Not a loop yet: this message waits out the short backoff and tries again.
				s.mu.Unlock()
				if err := s.sleep(j.ctx, wait); err != nil {
					return nil, fmt.Errorf("chat %s: waiting out a restart backoff: %w", k.key, err)
				}
				continue
			}
			s.mu.Unlock()
			return s.startSession(k, j)
		case sess.state == StateIdle:
			s.setStateLocked(sess, StateBusy)
			sess.turnStart = time.Now()
			s.mu.Unlock()
			return sess, nil
		case sess.state == StateRetiring:
			// A new child must not resume the thread while the old one may still write to it.
			s.mu.Unlock()
			select {
			case <-sess.reaped:
			case <-j.ctx.Done():
				return nil, fmt.Errorf("chat %s: %w", k.key, context.Cause(j.ctx))
			}
		default:
			st := sess.state
			s.mu.Unlock()
			// Only this worker starts or runs the key's children and the watcher clears k.sess
			// when one dies, so between turns the state is idle or retiring.
			s.log.Error("session in unexpected state between turns", zap.String("chat_key", k.key), zap.String("state", string(st)))
			return nil, fmt.Errorf("supervisor: chat %s: child in state %s between turns", k.key, st)
		}
	}
}

// startSession takes a slot, spawns a child and opens the key's thread. It returns the session
// in StateBusy.
func (s *Supervisor) startSession(k *keyState, j *job) (*session, error) {
	if err := s.acquireSlot(j.ctx); err != nil {
		return nil, fmt.Errorf("chat %s: %w", k.key, err)
	}
	s.mu.Lock()
	if k.needRestart {
		k.restarts++
		k.needRestart = false
	}
	s.nextID++
	now := time.Now()
	sess := &session{
		id:       s.nextID,
		key:      k,
		log:      s.log.With(zap.String("chat_key", k.key)),
		state:    StateStarting,
		started:  now,
		lastUsed: now,
		restarts: k.restarts,
		retireCh: make(chan struct{}),
		reaped:   make(chan struct{}),
		kick:     make(chan struct{}, 1),
	}
	k.sess = sess
	s.sessions[sess] = struct{}{}
	s.mu.Unlock()

	spawnCtx, cancel := context.WithTimeoutCause(s.accepting, s.cfg.HandshakeTimeout, handshakeCause(s.cfg.HandshakeTimeout))
	child, err := s.cfg.Spawn(spawnCtx, k.key)
	cause := context.Cause(spawnCtx)
	cancel()
	if err == nil && child == nil {
		err = errors.New("spawn returned no child")
	}
	if err != nil {
		closing := s.accepting.Err() != nil
		handshake := errors.Is(err, appserver.ErrHandshakeTimeout) || errors.Is(cause, appserver.ErrHandshakeTimeout)
		reason := ReasonStartFailed
		if handshake {
			reason = WatchdogHandshake
		}
		sess.log.Warn("codex child failed to start", zap.String("reason", reason), zap.Error(err))
		s.mu.Lock()
		s.finishLocked(sess, reason, err)
		s.mu.Unlock()
		switch {
		case closing:
			return nil, ErrClosed
		case handshake:
			return nil, &WatchdogError{ChatKey: k.key, Watchdog: WatchdogHandshake, Err: err}
		default:
			return nil, fmt.Errorf("chat %s: start codex: %w", k.key, err)
		}
	}

	pid := child.PID()
	ident := childproc.ReadIdentity(pid)
	s.mu.Lock()
	sess.child = child
	sess.pid = pid
	sess.proc = ident
	sess.log = sess.log.With(zap.Int("pid", pid))
	s.mu.Unlock()
	s.wg.Add(1)
	go s.watch(sess)
	s.persistRecords()

	threadID, err := s.openThread(k.key, sess, j.text)
	if err != nil {
		closing := s.accepting.Err() != nil
		handshake := errors.Is(err, appserver.ErrHandshakeTimeout)
		reason := ReasonStartFailed
		if handshake {
			reason = WatchdogHandshake
		}
		s.mu.Lock()
		s.retireLocked(sess, reason, err)
		reason = sess.reason // the watcher may have seen the child die first
		s.mu.Unlock()
		<-sess.reaped
		switch {
		case closing:
			return nil, ErrClosed
		case reason == WatchdogHandshake || reason == WatchdogDead:
			return nil, &WatchdogError{ChatKey: k.key, Watchdog: reason, PID: pid, Err: err}
		default:
			return nil, fmt.Errorf("chat %s: codex pid %d: %w", k.key, pid, err)
		}
	}

	s.mu.Lock()
	if sess.state != StateStarting {
		// The watcher saw the child die while the thread was being opened.
		reason, cause := sess.reason, sess.cause
		s.mu.Unlock()
		<-sess.reaped
		return nil, &WatchdogError{ChatKey: k.key, Watchdog: reason, PID: pid, Err: cause}
	}
	sess.threadID = threadID
	sess.log = sess.log.With(zap.String("thread_id", threadID))
	s.setStateLocked(sess, StateIdle)
	sess.ready = true
	if s.closed {
		// Shutdown began while the child started: leave it idle for Shutdown to close.
		s.mu.Unlock()
		return nil, ErrClosed
	}
	s.setStateLocked(sess, StateBusy)
	sess.turnStart = time.Now()
	s.mu.Unlock()
	sess.log.Info("codex child ready", zap.Bool("new_thread", sess.newThread),
		zap.Bool("resume_failed", sess.resumeFailed), zap.Int("restarts", sess.restarts))
	return sess, nil
}

// openThread resumes the key's stored thread or starts a new one, for a child about to run text.
// A stored thread codex does not know (no rollout) is replaced by a new thread and flagged in the
// session.
func (s *Supervisor) openThread(key string, sess *session, text string) (string, error) {
	ctx, cancel := context.WithTimeoutCause(s.accepting, s.cfg.HandshakeTimeout, handshakeCause(s.cfg.HandshakeTimeout))
	defer cancel()
	// appserver's errors already name the call and the thread; only a handshake timeout, which
	// arrives as a plain context error, needs its cause added.
	wrap := func(err error) error {
		if c := context.Cause(ctx); errors.Is(c, appserver.ErrHandshakeTimeout) && !errors.Is(err, appserver.ErrHandshakeTimeout) {
			return fmt.Errorf("%w: %w", c, err)
		}
		return err
	}
	if id, ok := s.cfg.Store.Get(key); ok && id != "" {
		err := sess.child.ResumeThread(ctx, id, s.cfg.Thread)
		if err == nil {
			sess.recorded = true
			s.dropUnfinishedRun(ctx, sess, id, text)
			return id, nil
		}
		if !errors.Is(err, appserver.ErrThreadNotFound) {
			return "", wrap(err)
		}
		sess.log.Warn("stored thread cannot be resumed; starting a new thread, earlier context is lost",
			zap.String("thread_id", id), zap.Error(err))
		sess.resumeFailed = true
	}
	id, err := sess.child.StartThread(ctx, s.cfg.Thread)
	if err != nil {
		return "", wrap(err)
	}
	sess.newThread = true
	return id, nil
}

// dropUnfinishedRun reverts the thread's last turn when it is an unfinished run of text.
//
// A message runs again when its earlier turn never finished: the daemon was killed mid-turn (the
// message was not acknowledged, so it comes again after the restart), or shutdown cut the turn
// off. That turn's user message is already in the thread's history (codex shows the turn as
// interrupted after a resume), so the model would see the message twice. Only a child that has
// just resumed the thread calls this, before its first turn: a warm child's last turn ended in
// that child, and a message run on it again is the user's own repetition. Completed and failed
// turns are kept, as is a turn with any other text. Files the dropped turn changed stay changed.
// Failing to check or revert must not lose the message: it is logged and the message runs anyway.
func (s *Supervisor) dropUnfinishedRun(ctx context.Context, sess *session, threadID, text string) {
	last, ok, err := sess.child.LastTurn(ctx, threadID)
	if err != nil {
		sess.log.Warn("cannot read the thread's last turn; if it was an unfinished run of this message, the model sees the message twice",
			zap.String("thread_id", threadID), zap.Error(err))
		return
	}
	unfinished := last.Status == protocol.TurnInterrupted || last.Status == protocol.TurnInProgress
	if !ok || !unfinished || len(last.UserTexts) != 1 || last.UserTexts[0] != text {
		return
	}
	if err := sess.child.RevertThread(ctx, threadID, last.ID); err != nil {
		sess.log.Warn("cannot drop the unfinished earlier run of this message; the model sees the message twice",
			zap.String("thread_id", threadID), zap.String("turn_id", last.ID), zap.Error(err))
		return
	}
	sess.log.Info("dropped the unfinished earlier run of this message from the thread's history",
		zap.String("thread_id", threadID), zap.String("turn_id", last.ID), zap.String("status", last.Status))
}

// turn runs one turn on a busy session under the turn watchdogs and settles the session.
func (s *Supervisor) turn(k *keyState, sess *session, j *job) (Reply, error) {
	ctx, cancel := context.WithCancelCause(j.ctx)
	defer cancel(nil)
	stopLife := context.AfterFunc(s.life, func() { cancel(context.Cause(s.life)) })
	defer stopLife()
	var deadline *time.Timer
	if d := s.cfg.TurnDeadline; d > 0 {
		deadline = time.AfterFunc(d, func() { cancel(&tripError{watchdog: WatchdogTurn, after: d}) })
	}
	pt := &postToolWatch{quiet: s.cfg.PostToolQuiet, cancel: cancel}
	first := sess.turns == 0
	input := []protocol.UserInput{{Type: "text", Text: j.text}}

	res, err := sess.child.RunTurn(ctx, sess.threadID, input, appserver.TurnOptions{
		OnNotification: pt.observe,
		InterruptGrace: s.cfg.InterruptGrace,
	})
	if deadline != nil {
		deadline.Stop()
	}
	pt.stop()
	cause := context.Cause(ctx)

	r := Reply{ChatKey: k.key, ThreadID: sess.threadID, PID: sess.pid}
	if first {
		r.NewThread, r.ResumeFailed = sess.newThread, sess.resumeFailed
	}
	// Reaching turn/completed, whatever the status, means the thread has a rollout to resume.
	settled := res != nil && res.Status != "" && res.Status != protocol.TurnInProgress
	if res != nil {
		p := projector.Project(res.Notifications)
		r.TurnID, r.Text, r.Status, r.Duration = res.TurnID, p.Reply, res.Status, res.Duration
		r.Usage = p.Usage
		if res.Error != nil {
			r.Error = res.Error.Message
		}
	}

	var watchdog, retire string
	if err != nil {
		var trip *tripError
		switch {
		case errors.Is(err, appserver.ErrWedged):
			watchdog, retire = WatchdogWedged, WatchdogWedged
		case errors.Is(err, appserver.ErrChildExited) || isDone(sess.child):
			watchdog, retire = WatchdogDead, WatchdogDead
		case errors.Is(err, appserver.ErrProtocol):
			retire = ReasonProtocol
		case errors.As(cause, &trip):
			watchdog = trip.watchdog
			if trip.watchdog == WatchdogPostTool {
				// A child that went silent after a tool is not trusted with the next turn even
				// if it honoured the interrupt.
				retire = WatchdogPostTool
			}
		}
	}
	if settled && !sess.recorded {
		s.recordThread(k.key, sess)
	}

	s.mu.Lock()
	sess.turns++
	s.turns++
	if settled && err == nil {
		sess.completed++
		k.failures, k.lastErr = 0, nil
		if k.bo != nil {
			k.bo.Reset()
		}
	}
	switch {
	case sess.state == StateRetiring:
		// The watcher got there first: the child died.
		if watchdog == "" && err != nil {
			watchdog = sess.reason
		}
	case retire != "":
		s.retireLocked(sess, retire, err)
	default:
		s.setStateLocked(sess, StateIdle)
		sess.lastUsed = time.Now()
		s.useSeq++
		sess.useSeq = s.useSeq
		select {
		case sess.kick <- struct{}{}:
		default:
		}
		s.rebalanceLocked()
	}
	retiring := sess.state == StateRetiring
	s.mu.Unlock()
	if retiring {
		// The reply goes out only after the child was reaped: callers may rely on it being gone.
		<-sess.reaped
	}

	switch {
	case watchdog != "":
		sess.log.Warn("turn ended by watchdog", zap.String("watchdog", watchdog), zap.Error(err))
		return r, &WatchdogError{ChatKey: k.key, Watchdog: watchdog, PID: sess.pid, Err: err}
	case err != nil:
		return r, fmt.Errorf("chat %s: codex pid %d: turn: %w", k.key, sess.pid, err)
	}
	return r, nil
}

// recordThread stores the key's thread id. A failed write is logged and counted, not returned:
// the reply is still good, and the next turn tries again.
func (s *Supervisor) recordThread(key string, sess *session) {
	if err := s.cfg.Store.Set(key, sess.threadID); err != nil {
		sess.log.Error("recording thread id failed", zap.Error(err))
		s.mu.Lock()
		s.storeErrors++
		s.mu.Unlock()
		return
	}
	sess.recorded = true
}

func isDone(c Child) bool {
	select {
	case <-c.Done():
		return true
	default:
		return false
	}
}

// postToolWatch trips WatchdogPostTool when a tool item completed and no notification of the turn
// followed within quiet.
type postToolWatch struct {
	quiet  time.Duration
	cancel context.CancelCauseFunc

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
}

func (p *postToolWatch) observe(n protocol.Notification) {
	if p.quiet <= 0 {
		return
	}
	tool := n.Method == protocol.NotifyItemCompleted && isToolItem(n.Params)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	if p.timer != nil {
		p.timer.Stop()
	}
	if !tool {
		return
	}
	if p.timer == nil {
		p.timer = time.AfterFunc(p.quiet, func() {
			p.cancel(&tripError{watchdog: WatchdogPostTool, after: p.quiet})
		})
	} else {
		p.timer.Reset(p.quiet)
	}
}

func (p *postToolWatch) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	if p.timer != nil {
		p.timer.Stop()
	}
}

func isToolItem(params json.RawMessage) bool {
	var n struct {
		Item struct {
			Type string `json:"type"`
		} `json:"item"`
	}
	if json.Unmarshal(params, &n) != nil {
		return false
	}
	switch n.Item.Type {
	case protocol.ItemCommandExecution, protocol.ItemFileChange, protocol.ItemMCPToolCall, protocol.ItemDynamicToolCall:
		return true
	}
	return false
}

// acquireSlot takes one of the MaxChildren slots, waiting (FIFO, bounded by SlotWait and ctx)
// while all are held; with MaxSlotWaiters keys waiting already it refuses at once. A waiter makes the least recently used idle child retire for it.
func (s *Supervisor) acquireSlot(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if s.used < s.cfg.MaxChildren && len(s.waiters) == 0 {
		s.used++
		s.mu.Unlock()
		return nil
	}
	if len(s.waiters) >= s.cfg.MaxSlotWaiters {
		n := len(s.waiters)
		s.mu.Unlock()
		return fmt.Errorf("%d chats already wait for one of %d codex slots: %w", n, s.cfg.MaxChildren, ErrNoSlot)
	}
	w := &slotWaiter{ready: make(chan struct{})}
	s.waiters = append(s.waiters, w)
	s.rebalanceLocked()
	s.mu.Unlock()

	t := time.NewTimer(s.cfg.SlotWait)
	defer t.Stop()
	var err error
	select {
	case <-w.ready:
		return w.err
	case <-ctx.Done():
		err = context.Cause(ctx)
	case <-t.C:
		err = fmt.Errorf("waited %s for one of %d codex slots: %w", s.cfg.SlotWait, s.cfg.MaxChildren, ErrNoSlot)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case w.granted && ctx.Err() == nil:
		return nil // granted just as the wait ran out: use it
	case w.granted:
		s.releaseSlotLocked()
	case w.err != nil:
		return w.err
	default:
		for i, q := range s.waiters {
			if q == w {
				s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
				break
			}
		}
	}
	return err
}

// releaseSlotLocked frees one slot, handing it straight to the first waiter so the cap holds.
func (s *Supervisor) releaseSlotLocked() {
	if len(s.waiters) > 0 {
		w := s.waiters[0]
		s.waiters[0] = nil
		s.waiters = s.waiters[1:]
		w.granted = true
		close(w.ready)
		return
	}
	s.used--
}

// rebalanceLocked retires idle children until every slot waiter has a retiring child whose slot
// it will get.
func (s *Supervisor) rebalanceLocked() {
	for len(s.waiters) > s.retiring {
		v := s.lruIdleLocked()
		if v == nil {
			return
		}
		v.log.Info("evicting least recently used idle child", zap.Int("waiting", len(s.waiters)))
		s.retireLocked(v, ReasonEvicted, nil)
	}
}

// lruIdleLocked picks the eviction victim: the least recently used idle child whose chat key has
// nothing queued. A child between two queued turns of its key is not idle in any useful sense:
// evicting it would only make its key respawn at once, so a slot waiter waits instead (bounded
// by SlotWait).
func (s *Supervisor) lruIdleLocked() *session {
	var best *session
	for sess := range s.sessions {
		if sess.state != StateIdle || len(sess.key.queue) > 0 {
			continue
		}
		if best == nil || sess.useSeq < best.useSeq {
			best = sess
		}
	}
	return best
}

// setStateLocked moves sess to state to. An invalid transition is a bug; it is logged and the
// state kept.
func (s *Supervisor) setStateLocked(sess *session, to State) bool {
	if err := checkTransition(sess.state, to); err != nil {
		s.log.DPanic("invalid child state transition", zap.String("chat_key", sess.key.key),
			zap.Int("pid", sess.pid), zap.Error(err))
		return false
	}
	if sess.state == StateRetiring {
		s.retiring--
	}
	if to == StateRetiring {
		s.retiring++
	}
	sess.state = to
	return true
}

// retireLocked starts retiring sess: its watcher closes and reaps the child. Idempotent; the
// first reason wins.
func (s *Supervisor) retireLocked(sess *session, reason string, cause error) {
	if sess.state == StateRetiring || sess.state == StateDead {
		return
	}
	if !s.setStateLocked(sess, StateRetiring) {
		return
	}
	sess.reason, sess.cause = reason, cause
	close(sess.retireCh)
}

// finishLocked marks sess dead after its child was reaped (or never started), frees its slot and
// does the crash accounting.
func (s *Supervisor) finishLocked(sess *session, reason string, cause error) {
	if !s.setStateLocked(sess, StateDead) {
		sess.state = StateDead // logged as a bug; keep the books straight anyway
	}
	delete(s.sessions, sess)
	s.retired[reason]++
	k := sess.key
	if k.sess == sess {
		k.sess = nil
	}
	switch reason {
	case ReasonIdle, ReasonEvicted, ReasonShutdown:
	default:
		k.needRestart = true
	}
	// A crash: the child never got ready, or died soon after without completing a turn. A child
	// that completed a turn was healthy; its death is a restart, not a loop.
	crashed := reason == ReasonStartFailed || reason == WatchdogHandshake ||
		(reason == WatchdogDead && (!sess.ready ||
			(sess.completed == 0 && time.Since(sess.started) < s.cfg.CrashWindow)))
	if crashed && !s.closed {
		s.recordFailureLocked(k, cause)
	}
	s.releaseSlotLocked()
	close(sess.reaped)
	s.gcKeyLocked(k)
}

func (s *Supervisor) recordFailureLocked(k *keyState, cause error) {
	if k.bo == nil {
		k.bo = backoff.NewExponentialBackOff(
			backoff.WithInitialInterval(s.cfg.CrashBackoffInitial),
			backoff.WithMaxInterval(s.cfg.CrashBackoffMax),
			backoff.WithMaxElapsedTime(0), // never give up on a chat
		)
	}
	k.failures++
	k.lastErr = cause
	d := k.bo.NextBackOff()
	k.retryAt = time.Now().Add(d)
	s.log.Warn("codex child crashed; backing off", zap.String("chat_key", k.key),
		zap.Int("failures", k.failures), zap.Duration("retry_in", d), zap.Error(cause))
}

// gcKeyLocked forgets a key with no work, no child, no pending backoff and no restart to count.
// A key whose child a watchdog retired is kept (a few hundred bytes) so that its next child
// reports the restart.
func (s *Supervisor) gcKeyLocked(k *keyState) {
	if !k.working && len(k.queue) == 0 && k.sess == nil && k.failures == 0 && !k.needRestart &&
		s.keys[k.key] == k {
		delete(s.keys, k.key)
	}
}

// watch is the child's watcher: it retires the child when it dies or idles too long, and when
// the child is retiring for any reason closes and reaps it.
func (s *Supervisor) watch(sess *session) {
	defer s.wg.Done()
	s.watchUntilRetiring(sess)
	err := sess.child.Close()
	s.mu.Lock()
	reason, cause, log := sess.reason, sess.cause, sess.log
	s.finishLocked(sess, reason, cause)
	s.mu.Unlock()
	s.persistRecords()
	log.Info("codex child retired", zap.String("reason", reason), zap.NamedError("cause", cause),
		zap.NamedError("close_error", err))
}

func (s *Supervisor) watchUntilRetiring(sess *session) {
	idle := time.NewTimer(time.Hour)
	idle.Stop()
	defer idle.Stop()
	for {
		select {
		case <-sess.child.Done():
			err := sess.child.Err()
			if err == nil {
				err = appserver.ErrChildExited
			}
			s.mu.Lock()
			s.retireLocked(sess, WatchdogDead, err)
			s.mu.Unlock()
			return
		case <-sess.retireCh:
			return
		case <-sess.kick:
		case <-idle.C:
		}
		// Re-arm, or retire when the idle time is up.
		s.mu.Lock()
		if sess.state == StateIdle && s.cfg.IdleTTL > 0 {
			if left := time.Until(sess.lastUsed.Add(s.cfg.IdleTTL)); left > 0 {
				idle.Reset(left)
			} else {
				s.retireLocked(sess, ReasonIdle, nil)
			}
		} else {
			idle.Stop()
		}
		s.mu.Unlock()
	}
}

// Shutdown stops taking work (Submit returns ErrClosed; messages still queued get ErrClosed),
// lets running turns finish until ctx is done, then interrupts the rest, closes every child and
// waits for all of them and for every supervisor goroutine. It returns an error wrapping ctx's
// cause when turns had to be interrupted. Calling it again waits for the first call to finish.
func (s *Supervisor) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		select {
		case <-s.shutdownDone:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	s.closed = true
	var queued []*job
	for _, k := range s.keys {
		queued = append(queued, k.queue...)
		k.queue = nil
	}
	for _, w := range s.waiters {
		w.err = ErrClosed
		close(w.ready)
	}
	s.waiters = nil
	running := len(s.sessions)
	s.mu.Unlock()
	s.stopAccepting(ErrClosed)
	for _, j := range queued {
		j.done <- outcome{reply: Reply{}, err: ErrClosed}
	}
	s.log.Info("shutting down", zap.Int("children", running), zap.Int("queued_dropped", len(queued)))

	drained := make(chan struct{})
	go func() { // owned here: both paths below wait for it
		s.workers.Wait()
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

	s.mu.Lock()
	var reaped []chan struct{}
	for sess := range s.sessions {
		s.retireLocked(sess, ReasonShutdown, nil)
		reaped = append(reaped, sess.reaped)
	}
	s.mu.Unlock()
	for _, r := range reaped {
		<-r
	}
	s.stopLife(ErrClosed)
	s.wg.Wait()
	if werr := s.writeRecords(); werr != nil {
		s.log.Error("writing children record failed", zap.Error(werr))
	}
	s.log.Info("shut down")
	close(s.shutdownDone)
	return err
}
