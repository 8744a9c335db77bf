package supervisor

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// A turn handed over by a reload keeps its deadline: what was left of it in the previous image
// is all the next image gives it, and the previous image measured it without the time an
// approval waited.
func TestTurnWatchDeadlineCarriesOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		old := newTurnWatch(10*time.Minute, 0, -1, func(error) {})
		time.Sleep(4 * time.Minute)
		old.mu.Lock()
		old.asking++
		old.pauseLocked()
		old.mu.Unlock()
		time.Sleep(time.Hour) // an approval waiting for a person does not count
		left := old.leftNow()
		old.stop()
		if left != 6*time.Minute {
			t.Fatalf("left %s, want 6m", left)
		}

		tripped := make(chan error, 1)
		start := time.Now()
		var at time.Time
		w := newTurnWatch(10*time.Minute, 0, -1, func(err error) {
			at = time.Now()
			tripped <- err
		})
		defer w.stop()
		w.carryOver(left)
		time.Sleep(time.Hour)
		synctest.Wait()
		var trip *tripError
		if err := <-tripped; !errors.As(err, &trip) || trip.watchdog != WatchdogTurn {
			t.Fatalf("tripped: %v", err)
		}
		if d := at.Sub(start); d != 6*time.Minute {
			t.Fatalf("tripped after %s, want the 6m left", d)
		}
		if got := newTurnWatch(0, 0, -1, func(error) {}).leftNow(); got != 0 {
			t.Fatalf("no deadline: left %s", got)
		}
	})
}
