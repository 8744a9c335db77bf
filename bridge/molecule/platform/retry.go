package platform

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// NewBackoff is an exponential backoff (with jitter) between initial and maxInterval that never
// gives up by itself: callers stop it with a context.
func NewBackoff(initial, maxInterval time.Duration) *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = initial
	b.MaxInterval = maxInterval
	b.MaxElapsedTime = 0
	b.Reset()
	return b
}

// RetryForever calls op until it returns nil, returns an error wrapped by backoff.Permanent (that
// error is returned unwrapped), or ctx is done (ctx's error is returned). onRetry sees every
// failure that will be retried and the wait before the next attempt. It is for the inbox's own
// calls (register, approvals, uploads); a message that waits goes through wait.go.
func RetryForever(ctx context.Context, initial, maxInterval time.Duration, op func() error, onRetry func(err error, wait time.Duration)) error {
	return backoff.RetryNotify(op, backoff.WithContext(NewBackoff(initial, maxInterval), ctx), onRetry)
}

// RunEvery calls fn every interval until ctx is done. The first call is one interval after the
// start. A slow fn delays the next call instead of queueing calls.
func RunEvery(ctx context.Context, interval time.Duration, fn func(ctx context.Context)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn(ctx)
		}
	}
}

// Sleep waits d or until ctx ends; it reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
