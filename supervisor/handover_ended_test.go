package supervisor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/appserver/appservertest"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// endingChild is a fake child whose turn, ended by the unreachable-model watch, completes just
// as a reload pauses the child: codex's turn/completed (interrupted) is what PauseRunning meets,
// so the child is paused as an idle one. Like the appserver client, a paused child takes no
// request until it is resumed: RevertThread waits for Resume (or its ctx).
type endingChild struct {
	*fakeChild
	end      chan struct{} // closed by PauseRunning: the turn completes as the child pauses
	endOnce  sync.Once
	returned chan struct{} // closed once RunTurn returned

	// books, when set, holds RevertThread until it is closed: the job's books outlast the freeze.
	books chan struct{}

	mu       sync.Mutex
	thawed   chan struct{} // non-nil while paused
	reverted int           // RevertThread calls that reached codex
}

func newEndingChild(c *fakeChild) *endingChild {
	return &endingChild{fakeChild: c, end: make(chan struct{}), returned: make(chan struct{})}
}

func (c *endingChild) RunTurn(ctx context.Context, threadID string, input []protocol.UserInput, opts appserver.TurnOptions) (*appserver.TurnResult, error) {
	if input[0].Text != "hello" {
		return c.fakeChild.RunTurn(ctx, threadID, input, opts)
	}
	defer close(c.returned)
	const turnID = "turn-1"
	opts.OnStarted(turnID)
	opts.OnNotification(unreachableNote)
	<-ctx.Done() // the unreachable watch interrupts the turn
	<-c.end
	return &appserver.TurnResult{ThreadID: threadID, TurnID: turnID, Status: protocol.TurnInterrupted,
			Notifications: appservertest.TurnNotifications(threadID, turnID, protocol.TurnInterrupted, "")},
		fmt.Errorf("turn %s interrupted: %w", turnID, context.Cause(ctx))
}

// PauseRunning ends the "hello" turn as it pauses the child; a later turn it hands over.
func (c *endingChild) PauseRunning(ctx context.Context) (appserver.Handover, error) {
	h, err := c.Pause(ctx)
	first := false
	c.endOnce.Do(func() { first = true })
	if first {
		// The turn completes as the child is held; the job's goroutine goes on from there.
		close(c.end)
		<-c.returned
		return h, err // no running turn: paused as an idle one
	}
	c.fakeChild.mu.Lock()
	ft := c.active
	c.fakeChild.mu.Unlock()
	if ft != nil {
		h.Turn = &appserver.TurnHandover{ThreadID: ft.threadID, TurnID: ft.id}
	}
	return h, err
}

func (c *endingChild) Pause(context.Context) (appserver.Handover, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.thawed = make(chan struct{})
	return appserver.Handover{PID: c.PID()}, nil
}

func (c *endingChild) Resume() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.thawed != nil {
		close(c.thawed)
		c.thawed = nil
	}
}

func (c *endingChild) RevertThread(ctx context.Context, _, _ string) error {
	c.mu.Lock()
	thawed := c.thawed
	c.mu.Unlock()
	if thawed != nil {
		select {
		case <-thawed:
		case <-ctx.Done():
			return fmt.Errorf("paused child: %w", context.Cause(ctx))
		}
	}
	if c.books != nil {
		select {
		case <-c.books:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	c.mu.Lock()
	c.reverted++
	c.mu.Unlock()
	return nil
}

// A turn that ends just as the freeze pauses its child (the model could not be reached, and the
// turn's interrupt completes then): the freeze finds no turn to hand over. The job still closes
// its books on the child (it drops the unanswered turn from the thread), and its caller, a
// Molecule try waiting out the model, waits for its result; the inbox must stop before the
// reload goes on. So the result is delivered while the reload goes on, not when it is called
// off: the freeze lets the child finish with the job, then hands it over idle.
func TestFreezeDeliversTurnThatEndsAsItsChildPauses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		var child *endingChild
		s := newSup(t, w, func(c *Config) {
			c.ModelUnreachable = 30 * time.Second
			c.Spawn = func(ctx context.Context, key string) (Child, error) {
				ch, err := w.spawn(ctx, key)
				if err != nil {
					return nil, err
				}
				child = newEndingChild(ch.(*fakeChild))
				return child, nil
			}
		})
		p := submitInputAsync(s, "a", Input{Text: "hello", MessageID: "m1"})
		time.Sleep(31 * time.Second) // the watch trips; the interrupt's completion is still to come
		synctest.Wait()

		start := time.Now()
		handed, err := s.Freeze(context.Background())
		synctest.Wait()
		answered, waited := p.finished(), time.Since(start)
		if err == nil {
			s.Thaw() // lets a caller still waiting (the bug) have its result, and the test end
		}
		r, perr := p.wait()
		shutdown(t, s)

		if err != nil || len(handed) != 1 || handed[0].Turn != nil {
			t.Fatalf("Freeze: %d children (%+v), %v; want the child handed over idle", len(handed), handed, err)
		}
		if !answered || waited != 0 {
			t.Fatalf("after Freeze (%s on the fake clock) the turn's caller answered: %v; want its result while the reload goes on", waited, answered)
		}
		var we *WatchdogError
		if !errors.As(perr, &we) || we.Watchdog != WatchdogModelUnreachable || errors.Is(perr, ErrHandedOver) {
			t.Fatalf("the turn's caller: %+v %v; want the model-unreachable result", r, perr)
		}
		child.mu.Lock()
		reverted := child.reverted
		child.mu.Unlock()
		if reverted != 1 {
			t.Fatalf("the unanswered turn was dropped %d times; want once, before the child was handed over", reverted)
		}
	})
}

// When the job of a turn that ended as its child paused closes its books for longer than the
// freeze may wait, the freeze gives up as for any work that outlasts it: the supervisor serves
// on (it does not stay frozen from its first try), and the job's caller gets its result.
func TestFreezeGivesUpOnTurnThatEndedAsItsChildPaused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		books := make(chan struct{})
		s := newSup(t, w, func(c *Config) {
			c.ModelUnreachable = 30 * time.Second
			c.Spawn = func(ctx context.Context, key string) (Child, error) {
				ch, err := w.spawn(ctx, key)
				if err != nil || key != "a" {
					return ch, err
				}
				child := newEndingChild(ch.(*fakeChild))
				child.books = books
				return child, nil
			}
		})
		p := submitInputAsync(s, "a", Input{Text: "hello", MessageID: "m1"})
		time.Sleep(31 * time.Second)
		synctest.Wait()

		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		handed, err := s.Freeze(ctx)
		cancel()
		if err == nil {
			s.Thaw()
		}
		_, berr := s.Submit(context.Background(), "b", "after the freeze")
		close(books)
		_, perr := p.wait()
		shutdown(t, s)

		if !errors.Is(err, context.DeadlineExceeded) || len(handed) != 0 {
			t.Fatalf("Freeze while the job closes its books: %d children, %v; want the deadline", len(handed), err)
		}
		if berr != nil {
			t.Fatalf("a message after the refused freeze: %v; want it served", berr)
		}
		var we *WatchdogError
		if !errors.As(perr, &we) || we.Watchdog != WatchdogModelUnreachable {
			t.Fatalf("the turn's caller: %v; want the model-unreachable result", perr)
		}
	})
}

// A message queued behind the turn that ended as its child paused runs next, while the freeze
// waits for quiet again; its turn is then handed over as soon as it runs, not waited for.
func TestFreezeHandsOverTurnQueuedBehindOneThatEnded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, func(c *Config) {
			c.ModelUnreachable = 30 * time.Second
			c.Spawn = func(ctx context.Context, key string) (Child, error) {
				ch, err := w.spawn(ctx, key)
				if err != nil {
					return nil, err
				}
				return newEndingChild(ch.(*fakeChild)), nil
			}
		})
		first := submitInputAsync(s, "a", Input{Text: "hello", MessageID: "m1"})
		synctest.Wait()
		queued := submitInputAsync(s, "a", Input{Text: "block:g", MessageID: "m2"})
		time.Sleep(31 * time.Second)
		synctest.Wait()

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		start := time.Now()
		handed, err := s.Freeze(ctx)
		waited := time.Since(start)
		cancel()
		_, ferr := first.wait()
		_, qerr := queued.wait()
		if err == nil {
			s.Thaw()
		}
		w.open("g")
		shutdown(t, s)

		if err != nil || len(handed) != 1 || handed[0].Turn == nil || handed[0].Turn.MessageID != "m2" || waited != 0 {
			t.Fatalf("Freeze after %s: %+v, %v; want the queued message's turn handed over at once", waited, handed, err)
		}
		var we *WatchdogError
		if !errors.As(ferr, &we) || we.Watchdog != WatchdogModelUnreachable {
			t.Fatalf("the ended turn's caller: %v; want the model-unreachable result", ferr)
		}
		if !errors.Is(qerr, ErrHandedOver) {
			t.Fatalf("the queued message: %v; want ErrHandedOver", qerr)
		}
	})
}
