package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// defaultTakeoverTimeout is --takeover-timeout's default: longer than a new image's own start
// bounds (codex --version, the login check), so that only an image that hangs meets it.
const defaultTakeoverTimeout = 60 * time.Second

// mainThreadWait is how long a give-back waits for the main thread before it re-executes from
// another thread.
const mainThreadWait = 2 * time.Second

// lastWords bounds the wait for the log line an image writes before it re-executes or exits
// on its takeover bound: its stderr may be what hangs.
const lastWords = 500 * time.Millisecond

// takeoverState is where a reloaded image's takeover stands.
type takeoverState int

const (
	// takeoverPending: nothing handed over was taken into use; the image can give it back.
	takeoverPending takeoverState = iota
	// takeoverGivingBack: a give-back is under way (it returns only if it failed).
	takeoverGivingBack
	// takeoverCommitted: the image took children, listeners or callers into use; nothing can
	// be given back.
	takeoverCommitted
	// takeoverServing: the image serves; the bound is over.
	takeoverServing
)

// takeover bounds a reloaded image's takeover. A timer started as soon as the handoff is read
// runs on the runtime's timers, whatever the image's own goroutines wait for: when the image
// has not served within the bound, it gives everything back to the previous binary if it took
// nothing into use yet (commit), and otherwise ends, so that a hung image is never in charge
// for long. Give-backs of every cause go through giveBack, one at a time.
type takeover struct {
	mu     sync.Mutex
	state  takeoverState
	mt     *MainThread
	timer  *time.Timer
	failed chan struct{} // closed when a give-back returned: it failed
	log    atomic.Pointer[zap.Logger]
}

// watch starts in's takeover bound (from the handoff; bound when it names none).
func (in *incoming) watch(mt *MainThread, bound time.Duration) {
	if in == nil || in.doc == nil {
		return
	}
	if ms := in.doc.TakeoverTimeoutMS; ms > 0 {
		bound = time.Duration(ms) * time.Millisecond
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	in.mt = mt
	in.timer = time.AfterFunc(bound, func() { in.expired(bound) })
}

// setLogger gives the bound a logger once the image has one.
func (in *incoming) setLogger(log *zap.Logger) {
	if in != nil {
		in.log.Store(log)
	}
}

// giveBack gives everything back to the previous binary because of why (execBack). It returns
// only when that failed, or when the image already began to take over.
func (in *incoming) giveBack(mt *MainThread, why error) error {
	if in == nil {
		return errors.New("no handoff to give back")
	}
	in.mu.Lock()
	if in.failed == nil {
		in.failed = make(chan struct{})
	}
	switch in.state {
	case takeoverGivingBack:
		in.mu.Unlock()
		<-in.failed
		return errors.New("the give-back under way failed")
	case takeoverCommitted, takeoverServing:
		in.mu.Unlock()
		return errors.New("this image already took over")
	}
	in.state = takeoverGivingBack
	if in.mt != nil {
		mt = in.mt
	}
	in.mu.Unlock()
	err := in.execBack(mt, why)
	close(in.failed)
	return err
}

// commit is called before the image takes anything handed over into use (adopts a child,
// serves a listener, answers a caller): from then on nothing can be given back. It fails when
// the bound ran out first and its give-back failed.
func (in *incoming) commit() error {
	if in == nil {
		return nil
	}
	in.mu.Lock()
	if in.state == takeoverGivingBack {
		in.mu.Unlock()
		<-in.failed
		return errors.New("the takeover bound ran out and the give-back failed")
	}
	in.state = takeoverCommitted
	in.raw = nil
	if in.fallback != nil {
		_ = in.fallback.Close()
	}
	in.mu.Unlock()
	return nil
}

// pending reports whether the image took nothing handed over into use yet.
func (in *incoming) pending() bool {
	if in == nil {
		return false
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.state == takeoverPending
}

// runTakingOver is runDaemon for an image a reload started: one that fails, or panics on the
// goroutine of its start, before it took anything handed over into use gives everything back
// to the previous binary instead of ending the daemon with its children.
func runTakingOver(ctx context.Context, r daemonRun) (err error) {
	if r.in == nil {
		return runDaemon(ctx, r)
	}
	defer func() {
		p := recover()
		if (p == nil && err == nil) || !r.in.pending() {
			if p != nil {
				panic(p)
			}
			return
		}
		why := err
		if p != nil {
			why = fmt.Errorf("it panicked: %v", p)
		}
		r.log.Error("reload: this image failed before it took anything over; giving everything back to the previous binary", zap.Error(why))
		_ = r.log.Sync()
		gerr := r.in.giveBack(r.mt, fmt.Errorf("it failed while taking over: %w", why))
		r.log.Error("reload: cannot give the handoff back; exiting", zap.Error(gerr))
		if p != nil {
			panic(p)
		}
	}()
	return runDaemon(ctx, r)
}

// serving ends the bound: the image serves.
func (in *incoming) serving() {
	if in == nil {
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	in.state = takeoverServing
	if in.timer != nil {
		in.timer.Stop()
	}
}

// expired runs when the image did not serve within bound.
func (in *incoming) expired(bound time.Duration) {
	in.mu.Lock()
	state := in.state
	in.mu.Unlock()
	why := fmt.Errorf("it did not take over within %s", bound)
	switch state {
	case takeoverPending:
		in.lastWords("reload: this image did not take over in time; giving everything back to the previous binary", why)
		err := in.giveBack(nil, why)
		in.lastWords("reload: the takeover bound ran out and the give-back failed; exiting", err)
	case takeoverCommitted:
		// Its children, listeners and callers are in use: they cannot be given back. Ending
		// is what hands the daemon to its service manager.
		in.lastWords("reload: this image did not take over in time, after it began to; exiting", why)
	default:
		return
	}
	os.Exit(1)
}

// lastWords logs msg (error-level) unless the log does not take it within lastWords: the
// image's stderr may be what hangs.
func (in *incoming) lastWords(msg string, err error) {
	log := in.log.Load()
	if log == nil {
		log = zap.NewNop()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		log.Error(msg, zap.Error(err))
		_ = log.Sync()
	}()
	t := time.NewTimer(lastWords)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}
