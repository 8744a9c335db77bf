package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/childproc"
	"github.com/molecule-ai/codex-warm/internal/protocol"
	"github.com/molecule-ai/codex-warm/supervisor/hosts"
)

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
	lostThread   string // the stored thread id that could not be resumed
	goneThread   string // the archived thread of a returning chat that is gone (retention.go)
	recorded     bool   // the thread id is in the store

	// spare is true while the session is a spare or being started as one: its key is a
	// placeholder that is in no map. fromSpare stays true once a chat took it. spareThread is the
	// thread a spare started in advance, for a chat with no stored thread.
	spare       bool
	fromSpare   bool
	spareThread string
	spareWarmed bool // a warm-up was tried on spareThread and its thread not deleted (warmup.go)
	spareUnused bool // the chat resumed its own thread: spareThread is to be deleted (warmup.go)

	started   time.Time
	turnStart time.Time
	lastUsed  time.Time // for the idle TTL
	useSeq    uint64    // for LRU: a counter, because clock readings tie (and do under synctest)
	ready     bool      // reached StateIdle once: its thread was opened
	turns     int       // turns run, whatever their outcome
	completed int       // turns that reached turn/completed without error
	restarts  int

	// compactedAt is turns when the thread was last compacted, or a compaction was due
	// (compact.go); compactedForMemory: the memory bound fired; compactNoticed: the chat was
	// told a compaction failed.
	compactedAt        int
	compactedForMemory bool
	compactNoticed     bool

	// host is the shared child the session's thread lives in (ThreadsPerChild > 1; nil
	// otherwise): child is then its threadView. busyAtDeath says the host died while this
	// session's turn or thread setup ran: only then is the death the chat's crash.
	host        *hosts.Host
	busyAtDeath bool
	// hostMem is the host's whole reading, mem its share (divided by its threads).
	hostMem childproc.Memory

	mem          childproc.Memory // latest reading of the memory sampler, when measured
	measured     bool
	memErrLogged bool // a failed reading was logged

	retireCh chan struct{} // closed on → retiring: tells the watcher to close the child
	reaped   chan struct{} // closed on → dead: the child was waited for
	kick     chan struct{} // the session went idle: the watcher re-arms its idle timer
}

// sleep waits d, or until ctx is done or the supervisor stops accepting work.
func (p *pool) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-p.accepting.Done():
		return ErrClosed
	}
}

// acquire returns the key's session in StateBusy, starting a child when the key has none.
func (p *pool) acquire(k *keyState, j *job) (*session, error) {
	for {
		p.mu.Lock()
		if p.closed && (!j.adopted || k.sess == nil) {
			p.mu.Unlock()
			return nil, ErrClosed
		}
		// An adopted turn runs on while shutting down: its message is owed its reply (closeLocked).
		sess := k.sess
		switch {
		case sess == nil:
			if wait := k.crash.wait(time.Now()); wait > 0 {
				if e := k.crash.loop(k.key, p.cfg.CrashLoopAfter); e != nil {
					p.mu.Unlock()
					return nil, e
				}
				// Not a loop yet: this message waits out the short backoff and tries again.
				p.mu.Unlock()
				if err := p.sleep(j.ctx, wait); err != nil {
					return nil, fmt.Errorf("chat %s: waiting out a restart backoff: %w", k.key, err)
				}
				continue
			}
			p.mu.Unlock()
			return p.startSession(k, j)
		case sess.state == StateIdle && sess.child != nil && sess.child.Err() != nil:
			// The child died while the chat was idle and its watcher has not retired the
			// session yet (a shared child's death retires every thread in it, one by one):
			// the message waits for that and gets a new child, not the dead one's error.
			p.mu.Unlock()
			select {
			case <-sess.reaped:
			case <-j.ctx.Done():
				return nil, fmt.Errorf("chat %s: %w", k.key, context.Cause(j.ctx))
			}
		case sess.state == StateIdle:
			p.setStateLocked(sess, StateBusy)
			sess.turnStart = time.Now()
			if j.adopted && !j.turnStarted.IsZero() {
				sess.turnStart = j.turnStarted
			}
			p.mu.Unlock()
			return sess, nil
		case sess.state == StateRetiring:
			// A new child must not resume the thread while the old one may still write to it.
			p.mu.Unlock()
			select {
			case <-sess.reaped:
			case <-j.ctx.Done():
				return nil, fmt.Errorf("chat %s: %w", k.key, context.Cause(j.ctx))
			}
		default:
			st := sess.state
			p.mu.Unlock()
			// Only this worker starts or runs the key's children and the watcher clears k.sess
			// when one dies, so between turns the state is idle or retiring.
			p.log.Error("session in unexpected state between turns", zap.String("chat_key", k.key), zap.String("state", string(st)))
			return nil, fmt.Errorf("supervisor: chat %s: child in state %s between turns", k.key, st)
		}
	}
}

// startSession gives the key a child: a spare when one is ready, else a new child in a slot of
// its own. It opens the key's thread on it and returns the session in StateBusy.
func (p *pool) startSession(k *keyState, j *job) (*session, error) {
	j.startedChild = true
	for {
		if sess := p.takeSpare(k); sess != nil {
			return p.openSession(k, sess, j)
		}
		changed := p.startingSpare()
		if changed == nil {
			break
		}
		select {
		case <-changed:
		case <-j.ctx.Done():
			return nil, fmt.Errorf("chat %s: waiting for a spare codex child: %w", k.key, context.Cause(j.ctx))
		case <-p.accepting.Done():
			return nil, ErrClosed
		}
	}
	if err := p.acquireSlot(j.ctx); err != nil {
		return nil, fmt.Errorf("chat %s: %w", k.key, err)
	}
	p.mu.Lock()
	p.countRestartLocked(k)
	sess := p.newSessionLocked(k, p.log.With(zap.String("chat_key", k.key)))
	k.sess = sess
	p.mu.Unlock()

	if err := p.spawnInto(sess); err != nil {
		return nil, startError(k.key, 0, p.accepting.Err() != nil, startFailureReason(err), err)
	}
	return p.openSession(k, sess, j)
}

// startFailureReason is why a child that failed to start, or to open its thread, is retired: the
// handshake watchdog when err wraps appserver.ErrHandshakeTimeout, else ReasonStartFailed.
func startFailureReason(err error) string {
	if errors.Is(err, appserver.ErrHandshakeTimeout) {
		return WatchdogHandshake
	}
	return ReasonStartFailed
}

// startError is what a job gets when its chat's child failed to start (pid 0) or to open the
// thread (the child's pid), retired for reason: ErrClosed when the supervisor was closing, a
// *WatchdogError when a watchdog ended the child (its handshake timed out, or it died), else err
// naming the chat and the child.
func startError(chatKey string, pid int, closing bool, reason string, err error) error {
	switch {
	case closing:
		return ErrClosed
	case reason == WatchdogHandshake || reason == WatchdogDead:
		return &WatchdogError{ChatKey: chatKey, Watchdog: reason, PID: pid, Err: err}
	case pid == 0:
		return fmt.Errorf("chat %s: start codex: %w", chatKey, err)
	default:
		return fmt.Errorf("chat %s: codex pid %d: %w", chatKey, pid, err)
	}
}

// newSessionLocked registers a session in StateStarting that holds a slot already taken.
func (p *pool) newSessionLocked(k *keyState, log *zap.Logger) *session {
	p.nextID++
	now := time.Now()
	sess := &session{
		id:       p.nextID,
		key:      k,
		log:      log,
		state:    StateStarting,
		started:  now,
		lastUsed: now,
		restarts: k.restarts,
		retireCh: make(chan struct{}),
		reaped:   make(chan struct{}),
		kick:     make(chan struct{}, 1),
	}
	p.sessions[sess] = struct{}{}
	return sess
}

// spawnInto starts sess's child and its watcher. On failure the session is finished (dead, slot
// freed) and the error says why; a handshake timeout wraps appserver.ErrHandshakeTimeout.
func (p *pool) spawnInto(sess *session) error {
	spawnCtx, cancel := context.WithTimeoutCause(p.accepting, p.cfg.HandshakeTimeout, handshakeCause(p.cfg.HandshakeTimeout))
	var child Child
	var err error
	if p.hosts != nil {
		p.mu.Lock()
		own := ownChildLocked(sess.key)
		p.mu.Unlock()
		var v *hosts.View
		if v, err = p.hosts.Place(spawnCtx, sess.key.key, own); err == nil {
			child = v
			p.mu.Lock()
			sess.host = v.Host()
			p.mu.Unlock()
		}
	} else {
		child, err = p.cfg.Spawn(spawnCtx, sess.key.key)
	}
	cause := context.Cause(spawnCtx)
	cancel()
	if err == nil && child == nil {
		err = errors.New("spawn returned no child")
	}
	if err != nil {
		if !errors.Is(err, appserver.ErrHandshakeTimeout) && errors.Is(cause, appserver.ErrHandshakeTimeout) {
			err = fmt.Errorf("%w: %w", cause, err)
		}
		reason := startFailureReason(err)
		sess.log.Warn("codex child failed to start", zap.String("reason", reason), zap.Error(err))
		p.mu.Lock()
		p.finishLocked(sess, reason, err)
		p.mu.Unlock()
		return err
	}

	pid := child.PID()
	ident := childproc.ReadIdentity(pid)
	p.mu.Lock()
	sess.child = child
	sess.proc = ident
	p.mu.Unlock()
	// The record is on disk before the pid is shown (status, the spare's readiness): a child
	// anyone has seen is one the next daemon's boot sweep knows, even if this daemon is killed
	// right after (TestE2EKillMidTurnAnswersEveryMessageOnce once saw a spare's pid in status
	// and killed the daemon before its record was written).
	p.persistRecords()
	p.mu.Lock()
	sess.pid = pid
	sess.log = sess.log.With(zap.Int("pid", pid))
	p.mu.Unlock()
	p.startWatcher(sess)
	return nil
}

// openSession opens the key's thread on sess, a child in StateStarting that is the key's, and
// returns the session in StateBusy.
func (p *pool) openSession(k *keyState, sess *session, j *job) (*session, error) {
	pid := sess.pid
	threadID, err := p.openThread(k.key, sess, j.text)
	if err != nil {
		closing := p.accepting.Err() != nil
		p.mu.Lock()
		p.retireLocked(sess, startFailureReason(err), err)
		reason := sess.reason // the watcher may have seen the child die first
		p.mu.Unlock()
		<-sess.reaped
		return nil, startError(k.key, pid, closing, reason, err)
	}

	p.mu.Lock()
	if sess.state != StateStarting {
		// The watcher saw the child die while the thread was being opened.
		reason, cause := sess.reason, sess.cause
		p.mu.Unlock()
		<-sess.reaped
		return nil, &WatchdogError{ChatKey: k.key, Watchdog: reason, PID: pid, Err: cause}
	}
	sess.threadID = threadID
	sess.log = sess.log.With(zap.String("thread_id", threadID))
	p.setStateLocked(sess, StateIdle)
	sess.ready = true
	if p.closed {
		// Shutdown began while the child started: leave it idle for Shutdown to close.
		p.mu.Unlock()
		return nil, ErrClosed
	}
	p.setStateLocked(sess, StateBusy)
	sess.turnStart = time.Now()
	p.mu.Unlock()
	sess.log.Info("codex child ready", zap.Bool("new_thread", sess.newThread),
		zap.Bool("resume_failed", sess.resumeFailed), zap.Int("restarts", sess.restarts),
		zap.Bool("from_spare", sess.fromSpare))
	return sess, nil
}

// openThread resumes the key's stored thread or starts a new one, for a child about to run text.
// A stored thread codex does not know (no rollout) is replaced by a new thread and flagged in the
// session.
func (p *pool) openThread(key string, sess *session, text string) (string, error) {
	ctx, cancel := context.WithTimeoutCause(p.accepting, p.cfg.HandshakeTimeout, handshakeCause(p.cfg.HandshakeTimeout))
	defer cancel()
	// appserver's errors already name the call and the thread; only a handshake timeout, which
	// arrives as a plain context error, needs its cause added.
	wrap := func(err error) error {
		if c := context.Cause(ctx); errors.Is(c, appserver.ErrHandshakeTimeout) && !errors.Is(err, appserver.ErrHandshakeTimeout) {
			return fmt.Errorf("%w: %w", c, err)
		}
		return err
	}
	if id, ok := p.cfg.Store.Get(key); ok && id != "" {
		err := sess.child.ResumeThread(ctx, id, p.cfg.Thread)
		if err == nil {
			sess.recorded = true
			p.claimSpareThread(ctx, sess, key, false)
			p.dropUnfinishedRun(ctx, sess, id, text)
			return id, nil
		}
		if !errors.Is(err, appserver.ErrThreadNotFound) {
			return "", wrap(err)
		}
		// Kept, with the reason, where an operator (a rollback, a CODEX_HOME put right) finds it.
		reason := fmt.Sprintf("not resumable: thread %s not found in CODEX_HOME %s", id, p.codexHome())
		left, aerr := p.cfg.Store.Archive(key, reason)
		p.archive.leftThread(key, left)
		if aerr != nil {
			sess.log.Error("could not archive the unresumable thread id; it is overwritten by the new thread's",
				zap.String("thread_id", id), zap.Error(aerr))
		}
		sess.log.Warn("stored thread cannot be resumed; starting a new thread, earlier context is lost (the id is in threads-archive.jsonl)",
			zap.String("thread_id", id), zap.String("codex_home", p.codexHome()), zap.Error(err))
		sess.resumeFailed, sess.lostThread = true, id
	} else if id, ok, err := p.archive.comeBack(ctx, key, sess); err != nil || ok {
		if ok {
			p.claimSpareThread(ctx, sess, key, false)
			p.dropUnfinishedRun(ctx, sess, id, text)
		}
		return id, wrap(err)
	}
	sess.newThread = true
	if sess.spareThread != "" {
		// A spare started this thread before any chat was known; codex writes no rollout until
		// its first turn (a warmed spare's is on disk, empty), so it is as new as one started now.
		p.claimSpareThread(ctx, sess, key, true)
		return sess.spareThread, nil
	}
	id, err := sess.child.StartThread(ctx, p.cfg.Thread)
	if err != nil {
		return "", wrap(err)
	}
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
func (p *pool) dropUnfinishedRun(ctx context.Context, sess *session, threadID, text string) {
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

// codexHome is the CODEX_HOME the children use, for messages that name it.
func (p *pool) codexHome() string {
	if h := p.cfg.AppServer.CodexHome; h != "" {
		return h
	}
	env := p.cfg.AppServer.Env
	if env == nil {
		env = os.Environ()
	}
	return appserver.EffectiveCodexHome(env)
}

// recordThread stores the key's thread id. A failed write is logged and counted, not returned:
// the reply is still good, and the next turn tries again.
func (p *pool) recordThread(key string, sess *session) {
	if err := p.cfg.Store.Set(key, sess.threadID); err != nil {
		sess.log.Error("recording thread id failed", zap.Error(err))
		p.mu.Lock()
		p.storeErrors++
		p.mu.Unlock()
		return
	}
	sess.recorded = true
	if sess.goneThread != "" && p.cfg.Retention != nil {
		if err := p.cfg.Retention.Told(key, sess.goneThread, sess.threadID); err != nil {
			sess.log.Error("could not record that the chat was told its archived thread is gone", zap.Error(err))
		}
	}
}
