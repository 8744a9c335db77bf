package daemon

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"
)

// recorder notes the order in which components saw their ctx done and returned.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) note(e string) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// part is a component that waits for its ctx (or for end), notes it, and returns err.
func (r *recorder) part(name string, end <-chan struct{}, err error) component {
	return runFunc(func(ctx context.Context) error {
		select {
		case <-ctx.Done():
		case <-end:
		}
		r.note(name)
		return err
	})
}

// TestRunStagesStopsInOrder: the first component to return begins the shutdown, each stage
// stops only once the one before it has returned, and its error is what runStages returns.
func TestRunStagesStopsInOrder(t *testing.T) {
	t.Parallel()
	var r recorder
	end := make(chan struct{})
	boom := errors.New("boom")
	later := errors.New("later")
	stages := []stage{
		{"first", []component{r.part("main", end, boom)}},
		{"second", []component{r.part("a", nil, nil), r.part("b", nil, later)}},
		{"third", []component{r.part("c", nil, nil)}},
	}
	done := make(chan error, 1)
	go func() { done <- runStages(context.Background(), stages) }()
	close(end)
	if err := <-done; !errors.Is(err, boom) {
		t.Fatalf("runStages = %v, want the first component's error %v", err, boom)
	}
	got := r.events
	if len(got) != 4 || got[0] != "main" || got[3] != "c" || !slices.Contains(got[1:3], "a") || !slices.Contains(got[1:3], "b") {
		t.Fatalf("stop order %v, want main, then a and b, then c", got)
	}
}

// TestRunStagesStopsAtCtx: ctx done stops every stage, in order; an error a component returns
// while it stops is still reported.
func TestRunStagesStopsAtCtx(t *testing.T) {
	t.Parallel()
	var r recorder
	flush := errors.New("flush failed")
	ctx, cancel := context.WithCancel(context.Background())
	stages := []stage{
		{"first", []component{r.part("main", nil, nil)}},
		{"empty", nil},
		{"last", []component{r.part("flush", nil, flush)}},
	}
	done := make(chan error, 1)
	go func() { done <- runStages(ctx, stages) }()
	cancel()
	if err := <-done; !errors.Is(err, flush) {
		t.Fatalf("runStages = %v, want %v", err, flush)
	}
	if !slices.Equal(r.events, []string{"main", "flush"}) {
		t.Fatalf("stop order %v, want [main flush]", r.events)
	}
}

// TestDrainClock: the drain's bound ends at the timeout after start, or at once at a second
// signal; before start the clock reads no signal (the main loop owns them then).
func TestDrainClock(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		sigs := make(chan os.Signal, 1)
		c := newDrainClock(30*time.Second, sigs, zap.NewNop())
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		sigs <- syscall.SIGTERM
		synctest.Wait()
		if len(sigs) != 1 {
			t.Fatal("the clock took a signal before the drain started")
		}
		<-sigs
		bound := c.start()
		time.Sleep(29 * time.Second) // synctest's fake clock
		synctest.Wait()
		if bound.Err() != nil {
			t.Fatalf("the bound ended before the timeout: %v", bound.Err())
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if !errors.Is(bound.Err(), context.DeadlineExceeded) {
			t.Fatalf("bound after the timeout: %v, want deadline exceeded", bound.Err())
		}
		stop()
		<-done
	})
	synctest.Test(t, func(t *testing.T) {
		sigs := make(chan os.Signal, 1)
		c := newDrainClock(time.Hour, sigs, zap.NewNop())
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		bound := c.start()
		sigs <- syscall.SIGINT
		<-bound.Done()
		if !errors.Is(bound.Err(), context.Canceled) {
			t.Fatalf("bound after a second signal: %v, want canceled", bound.Err())
		}
		stop()
		<-done
	})
}
