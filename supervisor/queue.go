package supervisor

import (
	"context"
	"fmt"
	"time"
)

// job is one Submit call: a message waiting in, or being run by, its key's worker.
type job struct {
	key  *keyState // stays in Supervisor.keys while the key's worker runs
	ctx  context.Context
	text string
	// reset marks a Reset: the worker starts the chat over instead of running a turn.
	reset bool
	// startedChild is set by the key's worker when the job started a child or took a spare.
	startedChild bool
	done         chan outcome // buffered: the worker never blocks on a caller that left
}

type outcome struct {
	reply        Reply
	err          error
	startedChild bool
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
	if s.cfg.OnTurn == nil {
		o := s.submit(ctx, chatKey, text)
		return o.reply, o.err
	}
	start := time.Now()
	o := s.submit(ctx, chatKey, text)
	s.cfg.OnTurn(TurnEvent{ChatKey: chatKey, Reply: o.reply, Err: o.err, Latency: time.Since(start), StartedChild: o.startedChild})
	return o.reply, o.err
}

func (s *Supervisor) submit(ctx context.Context, chatKey string, text string) outcome {
	none := func(err error) outcome { return outcome{reply: Reply{ChatKey: chatKey}, err: err} }
	if ctx.Err() != nil {
		return none(fmt.Errorf("chat %s: %w", chatKey, context.Cause(ctx)))
	}
	if s.cfg.Admit != nil {
		if err := s.cfg.Admit(ctx, chatKey); err != nil {
			return none(fmt.Errorf("chat %s: %w", chatKey, err))
		}
	}
	j := &job{ctx: ctx, text: text, done: make(chan outcome, 1)}

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return none(ErrClosed)
	}
	k := s.keys[chatKey]
	if k == nil {
		k = &keyState{key: chatKey}
		s.keys[chatKey] = k
	}
	if n := s.queue.LenLocked(chatKey); n >= s.cfg.MaxQueuePerKey {
		s.mu.Unlock()
		return none(fmt.Errorf("chat %s: %d messages waiting: %w", chatKey, n, ErrQueueFull))
	}
	j.key = k
	s.queue.PushLocked(chatKey, j)
	s.mu.Unlock()

	select {
	case o := <-j.done:
		return o
	case <-ctx.Done():
	}
	s.mu.Lock()
	s.queue.RemoveLocked(chatKey, func(q *job) bool { return q == j })
	s.gcKeyLocked(k)
	s.mu.Unlock()
	// The job may have finished in the meantime; prefer its answer.
	select {
	case o := <-j.done:
		return o
	default:
	}
	return none(fmt.Errorf("chat %s: %w", chatKey, context.Cause(ctx)))
}

// work runs one job on its key's worker (see Supervisor.queue) and answers its caller. The job
// runs under a context Stop can cancel.
func (s *Supervisor) work(_ string, j *job) {
	k := j.key
	ctx, cancel := context.WithCancelCause(j.ctx)
	defer cancel(nil)
	j.ctx = ctx
	s.mu.Lock()
	k.running, k.stopRun = j, cancel
	s.mu.Unlock()
	var r Reply
	var err error
	if j.reset {
		r, err = s.reset(k)
	} else {
		r, err = s.run(k, j)
	}
	s.mu.Lock()
	k.running, k.stopRun = nil, nil
	k.lastErr = ""
	if err != nil {
		k.lastErr = err.Error()
	}
	s.mu.Unlock()
	r.ChatKey = k.key
	j.done <- outcome{reply: r, err: err, startedChild: j.startedChild}
}

// keyIdleLocked is called as a key's worker exits.
func (s *Supervisor) keyIdleLocked(key string) {
	if k := s.keys[key]; k != nil {
		s.gcKeyLocked(k)
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
	if j.ctx.Err() != nil {
		// Stopped, or the caller left, while its child started: the turn never begins.
		s.mu.Lock()
		s.idleLocked(sess)
		s.mu.Unlock()
		return Reply{}, fmt.Errorf("chat %s: %w", k.key, context.Cause(j.ctx))
	}
	return s.turn(k, sess, j)
}
