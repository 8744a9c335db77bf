package supervisor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// The chat's own controls: stop what runs, start over, and read its own status line. They do not
// wait behind the chat's queue.

// ErrStopped is the cause of a turn interrupted, or a queued message dropped, by Stop. Submit's
// error wraps it; the Reply of an interrupted turn holds what the turn had produced.
var ErrStopped = errors.New("stopped from the chat")

// ReasonReset: the chat started over (Reset); its child held the old thread.
const ReasonReset = "reset"

// StopResult says what Stop did.
type StopResult struct {
	// Interrupted is true when a message was being worked on (its turn running, or its child
	// starting) and was ended.
	Interrupted bool
	// Dropped counts queued messages of the chat that were dropped without running.
	Dropped int
}

// Stop ends chatKey's running message and drops the ones queued behind it, and those the inbox
// received before the Stop but hands over only after it (see Input.Received). The running turn is
// interrupted (turn/interrupt): its Submit returns the interrupted Reply and an error wrapping
// ErrStopped; each dropped message's Submit returns an error wrapping ErrStopped at once. Stop
// returns without waiting for the interrupt to settle.
func (s *Supervisor) Stop(chatKey string) StopResult {
	return s.chats.stop(chatKey)
}

func (c *chats) stop(chatKey string) StopResult {
	var res StopResult
	var dropped []*job
	c.st.do(func(t *table) { res, dropped = t.stop(chatKey, time.Now()) })
	for _, j := range dropped {
		j.done <- outcome{err: fmt.Errorf("chat %s: dropped: %w", chatKey, ErrStopped)}
	}
	if res != (StopResult{}) {
		c.log.Info("chat stopped its work", zap.String("chat_key", chatKey),
			zap.Bool("interrupted", res.Interrupted), zap.Int("dropped", res.Dropped))
	}
	return res
}

// stop is chats.stop's transition: it marks the stop, takes chatKey's waiting messages out of
// its queue and interrupts its running one.
func (t *table) stop(chatKey string, now time.Time) (StopResult, []*job) {
	t.stops.mark(chatKey, now)
	k := t.keys[chatKey]
	if k == nil {
		return StopResult{}, nil
	}
	// A /new sent before the /stop still applies.
	dropped := t.queue.RemoveAllLocked(chatKey, func(j *job) bool { return !j.reset })
	res := StopResult{Dropped: len(dropped)}
	if k.stopRun != nil && !k.running.reset {
		k.stopRun(ErrStopped)
		res.Interrupted = true
	}
	return res, dropped
}

// ResetResult says what Reset did.
type ResetResult struct {
	// OldThreadID is the thread the chat leaves ("" when it had none or Deferred is true).
	OldThreadID string
	// Deferred is true when messages of the chat were running or queued: they finish on the
	// old thread, and the reset applies after them.
	Deferred bool
}

// Reset makes chatKey's next message start a new codex thread. The old thread id is archived by
// the ThreadStore (see sessions.Store.Archive), not resumed again, and the chat's child, which
// holds the old thread, is retired (reason ReasonReset). Work already queued finishes on the old
// thread first: then Reset returns at once with Deferred set.
func (s *Supervisor) Reset(ctx context.Context, chatKey string) (ResetResult, error) {
	return s.chats.startOver(ctx, chatKey)
}

func (c *chats) startOver(ctx context.Context, chatKey string) (ResetResult, error) {
	r, deferred, err := c.command(ctx, chatKey, c.reset)
	if deferred {
		return ResetResult{Deferred: true}, err
	}
	return ResetResult{OldThreadID: r.ThreadID}, err
}

// reset runs a Reset job on the key's worker: it retires the key's idle child and archives the
// stored thread id.
func (c *chats) reset(k *keyState) (Reply, error) {
	c.retireChild(k, ReasonReset)
	old, err := c.cfg.Store.Archive(k.key, "/new")
	c.archive.leftThread(k.key, old) // old is set once the line is written, even when err is not nil
	if err != nil {
		c.log.Error("chat could not start over; its next message resumes the old thread",
			zap.String("chat_key", k.key), zap.Error(err))
		return Reply{}, fmt.Errorf("chat %s: start over: %w", k.key, err)
	}
	c.log.Info("chat started over; its next message opens a new thread", zap.String("chat_key", k.key),
		zap.String("old_thread_id", old))
	return Reply{ThreadID: old}, nil
}

// ChatStatus returns chatKey's row of the process table (ok false: the chat has no child now)
// and the chat's last error, if its last message failed.
func (s *Supervisor) ChatStatus(chatKey string) (row ChildStatus, ok bool, lastErr string) {
	return s.chats.status(chatKey)
}

func (c *chats) status(chatKey string) (row ChildStatus, ok bool, lastErr string) {
	var queued int
	c.st.do(func(t *table) {
		if k := t.keys[chatKey]; k != nil {
			lastErr = k.lastErr
			queued = t.queued(chatKey)
		}
	})
	// Only this chat's child: a chat's /status must not read /proc for the whole pool.
	for _, c := range c.pool.snapshot(func(sess *session) bool { return sess.key.key == chatKey }).Children {
		if c.ChatKey == chatKey {
			return c, true, lastErr
		}
	}
	return ChildStatus{ChatKey: chatKey, Queued: queued}, false, lastErr
}

// stopMarkTTL is how long a chat's Stop is remembered for messages received before it that
// reach the supervisor after it. The Molecule inbox hands a message over within moments, or
// retries a busy one for up to its BusyRetryFor (5 minutes by default); a mark older than this
// can only concern messages received before it, and no message takes that long to arrive.
const stopMarkTTL = 15 * time.Minute

// stopMarks remembers when each chat last asked to stop, for stopMarkTTL. It holds one entry
// per chat that stopped within the TTL, whether or not the chat has a key state, since the
// messages it drops may reach the supervisor before their chat has one.
type stopMarks map[string]time.Time

// mark records a Stop of chatKey at now and forgets marks past the TTL.
func (m *stopMarks) mark(chatKey string, now time.Time) {
	if *m == nil {
		*m = make(stopMarks)
	}
	for k, at := range *m {
		if now.Sub(at) > stopMarkTTL {
			delete(*m, k)
		}
	}
	(*m)[chatKey] = now
}

// stoppedSince reports whether chatKey asked to stop at or after received (a zero
// received: never).
func (m stopMarks) stoppedSince(chatKey string, received time.Time) bool {
	at, ok := m[chatKey]
	return ok && !received.IsZero() && !at.Before(received)
}
