package supervisor

import (
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"
)

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
