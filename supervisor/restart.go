package supervisor

import (
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"
)

// crashBackoff is a chat key's restart backoff: consecutive crashes of its children and when the
// next child may start. It lives in the state table, like the keyState holding it.
type crashBackoff struct {
	failures int // consecutive crashes
	bo       *backoff.ExponentialBackOff
	retryAt  time.Time
	lastErr  error
}

// record counts a crash with cause and returns the backoff before the next start.
func (c *crashBackoff) record(initial, maxInterval time.Duration, cause error, now time.Time) time.Duration {
	if c.bo == nil {
		c.bo = backoff.NewExponentialBackOff(
			backoff.WithInitialInterval(initial),
			backoff.WithMaxInterval(maxInterval),
			backoff.WithMaxElapsedTime(0), // never give up on a chat
		)
	}
	c.failures++
	c.lastErr = cause
	d := c.bo.NextBackOff()
	c.retryAt = now.Add(d)
	return d
}

// reset forgets the crashes: a child of the key completed a turn.
func (c *crashBackoff) reset() {
	c.failures, c.lastErr = 0, nil
	if c.bo != nil {
		c.bo.Reset()
	}
}

// pending reports whether a crash is counted: the key's next child is not started before
// retryAt.
func (c *crashBackoff) pending() bool { return c.failures > 0 }

// loop is the error of a message that meets a crash loop: after crashes or more in a row, nil
// before.
func (c *crashBackoff) loop(chatKey string, after int) *CrashLoopError {
	if c.failures < after {
		return nil
	}
	return &CrashLoopError{ChatKey: chatKey, Failures: c.failures, RetryAt: c.retryAt, Err: c.lastErr}
}

// count is the crashes in a row.
func (c *crashBackoff) count() int { return c.failures }

// wait is how long a new child must still wait at now; 0 with no crash pending.
func (c *crashBackoff) wait(now time.Time) time.Duration {
	if c.failures == 0 {
		return 0
	}
	return max(c.retryAt.Sub(now), 0)
}

// isCrash reports whether a child that ended for reason counts as a crash: it never got ready,
// or died soon after without completing a turn. A child that completed a turn was healthy; its
// death is a restart, not a loop.
func isCrash(reason string, ready bool, completed int, age, window time.Duration) bool {
	switch reason {
	case ReasonStartFailed, WatchdogHandshake:
		return true
	case WatchdogDead:
		return !ready || (completed == 0 && age < window)
	}
	return false
}

func (t *table) recordFailure(k *keyState, cause error) {
	d := k.crash.record(t.cfg.CrashBackoffInitial, t.cfg.CrashBackoffMax, cause, time.Now())
	t.crashBackoffs++
	t.log.Warn("codex child crashed; backing off", zap.String("chat_key", k.key),
		zap.Int("failures", k.crash.count()), zap.Duration("retry_in", d), zap.Error(cause))
}
