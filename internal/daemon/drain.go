package daemon

import (
	"context"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"
)

// drainClock bounds the daemon's drain: it starts when the first component of the drain stops
// (start), and its bound ends at --drain-timeout or at a second stop signal, whichever comes
// first. Run watches for that signal from the drain's start until its own ctx is done, which
// the shutdown order puts after the drain.
type drainClock struct {
	timeout time.Duration
	sigs    <-chan os.Signal
	log     *zap.Logger

	once  sync.Once
	begun chan struct{} // closed by start
	ctx   context.Context
	cut   context.CancelFunc
}

func newDrainClock(timeout time.Duration, sigs <-chan os.Signal, log *zap.Logger) *drainClock {
	return &drainClock{timeout: timeout, sigs: sigs, log: log, begun: make(chan struct{})}
}

// start begins the drain, the first call only, and returns its bound.
func (c *drainClock) start() context.Context {
	c.once.Do(func() {
		c.ctx, c.cut = context.WithTimeout(context.Background(), c.timeout)
		close(c.begun)
	})
	return c.ctx
}

// Run cuts the drain short at a second signal. The main loop took the first, and has returned
// before the drain starts: the two never read the signals at once.
func (c *drainClock) Run(ctx context.Context) error {
	select {
	case <-c.begun:
	case <-ctx.Done():
		c.start() // a drain that had nothing to bound: its timer is released below
	}
	defer c.cut()
	select {
	case sig := <-c.sigs:
		c.log.Warn("second signal; interrupting running turns now", zap.String("signal", sig.String()))
		c.cut()
	case <-ctx.Done():
	}
	return nil
}
