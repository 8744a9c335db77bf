package supervisor

import (
	"context"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
)

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

// gcKeyLocked forgets a key with no work, no child, no pending backoff and no restart to count.
// A key whose child a watchdog retired is kept (a few hundred bytes) so that its next child
// reports the restart.
func (s *Supervisor) gcKeyLocked(k *keyState) {
	if !k.working && len(k.queue) == 0 && k.sess == nil && k.failures == 0 && !k.needRestart &&
		s.keys[k.key] == k {
		delete(s.keys, k.key)
	}
}
