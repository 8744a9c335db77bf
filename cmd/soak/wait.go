package main

import (
	"context"
	"fmt"
	"time"
)

// pollUntil checks cond at once and then every interval until it reports true or ctx ends; then
// the error wraps ctx's and the last error cond returned (errors do not stop the polling). It is for
// conditions the soak cannot be notified of, such as a process's state or the daemon's status.
func pollUntil(ctx context.Context, interval time.Duration, cond func(context.Context) (bool, error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		ok, err := cond(ctx)
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
			}
			return ctx.Err()
		case <-t.C:
		}
	}
}
