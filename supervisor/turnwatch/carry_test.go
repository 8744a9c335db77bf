package turnwatch

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
		old := New(10*time.Minute, 0, -1, func(error) {})
		time.Sleep(4 * time.Minute)
		old.mu.Lock()
		old.asking++
		old.pauseLocked()
		old.mu.Unlock()
		time.Sleep(time.Hour) // an approval waiting for a person does not count
		left := old.LeftNow()
		old.Stop()
		if left != 6*time.Minute {
			t.Fatalf("left %s, want 6m", left)
		}

		tripped := make(chan error, 1)
		start := time.Now()
		var at time.Time
		w := New(10*time.Minute, 0, -1, func(err error) {
			at = time.Now()
			tripped <- err
		})
		defer w.Stop()
		w.CarryOver(left)
		time.Sleep(time.Hour)
		synctest.Wait()
		var trip *TripError
		if err := <-tripped; !errors.As(err, &trip) || trip.Watchdog != Deadline {
			t.Fatalf("tripped: %v", err)
		}
		if d := at.Sub(start); d != 6*time.Minute {
			t.Fatalf("tripped after %s, want the 6m left", d)
		}
		if got := New(0, 0, -1, func(error) {}).LeftNow(); got != 0 {
			t.Fatalf("no deadline: left %s", got)
		}
	})
}
