package daemon

import (
	"context"
	"sync"
)

// component is one part of a running daemon, in suture's Serve shape: Run serves until ctx is
// done, then stops what it started, waits for its own goroutines and returns. A component that
// returns before its ctx is done ends the daemon (runStages).
type component interface {
	Run(ctx context.Context) error
}

// runFunc is a component that is one function.
type runFunc func(ctx context.Context) error

// Run runs f.
func (f runFunc) Run(ctx context.Context) error { return f(ctx) }

// stage is components the shutdown stops together.
type stage struct {
	name  string
	parts []component
}

// runStages runs every component of stages at once, until ctx is done or one of them returns;
// then it stops the stages one after the other, in the order given: each stage's components see
// their ctx done together, and the next stage's only once all of those returned. It returns the
// first error a component returned (the one that ended the daemon, when it has one).
func runStages(ctx context.Context, stages []stage) error {
	n := 0
	for _, s := range stages {
		n += len(s.parts)
	}
	returned := make(chan error, n) // every component sends once, so no send waits
	stops := make([]context.CancelFunc, len(stages))
	waits := make([]sync.WaitGroup, len(stages))
	for i, s := range stages {
		// A stage's ctx keeps ctx's values but not its cancellation: only the shutdown's order
		// stops a stage.
		sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		stops[i] = stop
		for _, p := range s.parts {
			waits[i].Go(func() { returned <- p.Run(sctx) })
		}
	}
	var errs []error
	select {
	case <-ctx.Done():
	case err := <-returned:
		errs = append(errs, err)
	}
	for i := range stages {
		stops[i]()
		waits[i].Wait()
	}
	close(returned)
	for err := range returned {
		errs = append(errs, err)
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
