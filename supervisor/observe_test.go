package supervisor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// eventLog collects Config.OnTurn events.
type eventLog struct {
	mu     sync.Mutex
	events []TurnEvent
}

func (l *eventLog) add(e TurnEvent) { l.mu.Lock(); l.events = append(l.events, e); l.mu.Unlock() }

func (l *eventLog) all() []TurnEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]TurnEvent(nil), l.events...)
}

// OnTurn sees every Submit once, with what Submit returned, how long the caller waited, and
// whether the message started a child for its chat (its first message, and the first after the
// child died), but not a message that found the chat's child warm.
func TestOnTurnEvents(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		var log eventLog
		s := newSup(t, w, func(c *Config) { c.OnTurn = log.add; c.MaxQueuePerKey = 1 })
		defer shutdown(t, s)

		mustSubmit(t, s, "canvas:a", "hello")
		mustSubmit(t, s, "canvas:a", "again")
		w.child(0).exit(errors.New("SIGKILL from outside"))
		synctest.Wait()
		mustSubmit(t, s, "canvas:a", "after the crash")

		// One running, one waiting: the third is refused at once.
		running := submitAsync(context.Background(), s, "peer:b", "block:g")
		synctest.Wait()
		waiting := submitAsync(context.Background(), s, "peer:b", "queued")
		synctest.Wait()
		if _, err := s.Submit(context.Background(), "peer:b", "third"); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("third: %v, want ErrQueueFull", err)
		}
		time.Sleep(3 * time.Second)
		w.open("g")
		if _, err := running.wait(); err != nil {
			t.Fatal(err)
		}
		if _, err := waiting.wait(); err != nil {
			t.Fatal(err)
		}

		ev := log.all()
		type row struct {
			key     string
			started bool
			status  string
			err     error
		}
		var got []row
		for _, e := range ev {
			got = append(got, row{e.ChatKey, e.StartedChild, e.Reply.Status, e.Err})
		}
		want := []row{
			{"canvas:a", true, "completed", nil},
			{"canvas:a", false, "completed", nil},
			{"canvas:a", true, "completed", nil},
			{"peer:b", false, "", ErrQueueFull},
			{"peer:b", true, "completed", nil},
			{"peer:b", false, "completed", nil},
		}
		// The last two return at the same instant, in either order.
		if len(got) == 6 && !got[4].started {
			got[4], got[5] = got[5], got[4]
		}
		if len(got) != len(want) {
			t.Fatalf("events %+v, want %d", got, len(want))
		}
		for i := range want {
			g, w := got[i], want[i]
			if g.key != w.key || g.started != w.started || g.status != w.status || !errors.Is(g.err, w.err) || (w.err == nil) != (g.err == nil) {
				t.Errorf("event %d: %+v, want %+v", i, g, w)
			}
		}
		// The blocked turn's caller waited the 3 s the gate stayed shut; its queued follower too.
		if ev[4].Latency != 3*time.Second || ev[5].Latency != 3*time.Second {
			t.Errorf("latencies %s, %s; want 3s each", ev[4].Latency, ev[5].Latency)
		}
		if ev[3].Latency != 0 {
			t.Errorf("refused message latency %s, want 0", ev[3].Latency)
		}
		if st := s.Status().Totals; st.Restarts != 1 || st.CrashBackoffs != 0 {
			t.Errorf("restarts %d crash backoffs %d, want 1 and 0", st.Restarts, st.CrashBackoffs)
		}
	})
}

// Totals.CrashBackoffs counts every crash that started a restart backoff, of chats and of
// spares; Totals.Restarts counts the children started after one.
func TestTotalsCrashBackoffs(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		w.spawnHook = func(_ context.Context, _ string, n int) (bool, error) {
			if n <= 2 {
				return false, fmt.Errorf("exec: spawn %d fails", n)
			}
			return false, nil
		}
		s := newSup(t, w, nil)
		defer shutdown(t, s)
		if _, err := s.Submit(context.Background(), "a", "hi"); err == nil {
			t.Fatal("first spawn: no error")
		}
		// The second spawn (after the first backoff) fails too; the third answers.
		if _, err := s.Submit(context.Background(), "a", "hi"); err == nil {
			t.Fatal("second spawn: no error")
		}
		mustSubmit(t, s, "a", "hi")
		if st := s.Status().Totals; st.CrashBackoffs != 2 || st.Restarts != 2 {
			t.Errorf("crash backoffs %d restarts %d, want 2 and 2", st.CrashBackoffs, st.Restarts)
		}
	})
}
