package appserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Defaults of OverloadRetry.
//
// codex answers -32001 when a request finds its request queue full (128 messages in codex-rs
// app-server's transport); the request is dropped before it is processed. Measured here
// (codex-cli 0.169.0, a shared machine at load ~15): a burst of 1000 account/read requests in
// one write got 507 refusals, and codex answered about one request per millisecond (395 within
// 390 ms; 2632 of a 5000 burst within 2.4 s), so a full queue drains in ~130 ms. One client per
// child sends a few requests at a time, so the queue fills only when codex's processor stalls.
// Hence a first retry after 100 ms (50 to 150 ms with jitter), about when a full queue has
// drained; the waits double, with ±50 % jitter so that children refused together do not retry
// together, up to 2 s; after 8 retries or 10 s (0.1+0.2+0.4+0.8+1.6+2+2+2 = 9.1 s) the child
// is busy rather than slow. A chat message then waits at most ~10 s longer before the daemon
// answers "busy", well inside the turn deadline (600 s).
const (
	DefaultOverloadInitial     = 100 * time.Millisecond
	DefaultOverloadMaxInterval = 2 * time.Second
	DefaultOverloadMaxElapsed  = 10 * time.Second
	DefaultOverloadMaxRetries  = 8
)

// OverloadRetry bounds the retries of a request codex refused with -32001 "Server overloaded;
// retry later.". The waits grow exponentially from Initial to MaxInterval, each with ±50 %
// jitter; retrying stops after MaxRetries retries or once the next wait would end more than
// MaxElapsed after the first refusal, whichever comes first. Zero fields take the defaults.
type OverloadRetry struct {
	// Initial is the wait before the first retry. Default DefaultOverloadInitial.
	Initial time.Duration
	// MaxInterval caps one wait. Default DefaultOverloadMaxInterval.
	MaxInterval time.Duration
	// MaxElapsed caps the time from the first refusal to the end of the last wait. Default
	// DefaultOverloadMaxElapsed.
	MaxElapsed time.Duration
	// MaxRetries caps the retries of one request; negative turns retrying off. Default
	// DefaultOverloadMaxRetries.
	MaxRetries int
}

func (p OverloadRetry) withDefaults() OverloadRetry {
	if p.Initial <= 0 {
		p.Initial = DefaultOverloadInitial
	}
	if p.MaxInterval <= 0 {
		p.MaxInterval = DefaultOverloadMaxInterval
	}
	if p.MaxElapsed <= 0 {
		p.MaxElapsed = DefaultOverloadMaxElapsed
	}
	if p.MaxRetries == 0 {
		p.MaxRetries = DefaultOverloadMaxRetries
	}
	return p
}

// do runs attempt, and runs it again after a wait for as long as it fails with ErrOverloaded and
// p allows; onRetry is called before each wait with the retry's number (from 1) and the wait.
// Any other result of attempt returns as it is. Past the bound the last refusal returns, still
// wrapping ErrOverloaded, with the count of attempts. A ctx done after a refusal ends the wait
// at once, with an error that wraps ctx's cause and names the refusal.
//
// Retrying is safe for every request, turn/start included: codex refuses with -32001 before the
// request reaches its processor, so a refused request did nothing.
func (p OverloadRetry) do(ctx context.Context, onRetry func(n int, wait time.Duration), attempt func() error) error {
	var b backoff.BackOff // made at the first refusal: the elapsed bound counts from there
	var start time.Time
	for n := 1; ; n++ {
		err := attempt()
		if !errors.Is(err, ErrOverloaded) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (while waiting to retry after: %v)", context.Cause(ctx), err)
		}
		if b == nil {
			start = time.Now()
			b = backoff.WithMaxRetries(backoff.NewExponentialBackOff(
				backoff.WithInitialInterval(p.Initial),
				backoff.WithMaxInterval(p.MaxInterval),
				backoff.WithMaxElapsedTime(p.MaxElapsed),
				backoff.WithMultiplier(2),
				backoff.WithRandomizationFactor(0.5),
			), uint64(max(p.MaxRetries, 0)))
		}
		wait := b.NextBackOff()
		if wait == backoff.Stop {
			return fmt.Errorf("%w (refused %d times in %s)", err, n, time.Since(start).Round(time.Millisecond))
		}
		onRetry(n, wait)
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("%w (while waiting to retry after: %v)", context.Cause(ctx), err)
		case <-timer.C:
		}
	}
}
