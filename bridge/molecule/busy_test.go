package molecule

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/bridge/chat"
	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// busyAnswerer answers err to every Submit until free is closed, then echoes. It records when
// each Submit came.
type busyAnswerer struct {
	err  error
	free chan struct{}

	mu    sync.Mutex
	calls []time.Time
}

func newBusyAnswerer(err error) *busyAnswerer {
	return &busyAnswerer{err: err, free: make(chan struct{})}
}

func (b *busyAnswerer) SubmitInput(_ context.Context, key string, in supervisor.Input) (supervisor.Reply, error) {
	text := in.Text
	b.mu.Lock()
	b.calls = append(b.calls, time.Now())
	b.mu.Unlock()
	select {
	case <-b.free:
		return chattest.EchoReply(key, text), nil
	default:
		return supervisor.Reply{}, fmt.Errorf("chat %s: %w", key, b.err)
	}
}

func (b *busyAnswerer) attempts() []time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]time.Time(nil), b.calls...)
}

// runBubble runs a Molecule on p's in-process transport inside a synctest bubble, with the
// default retry timings (RetryInitial 1 s, RetryMax 30 s) and BusyRetryFor's default. stop
// cancels Run and waits for it.
func runBubble(t *testing.T, p *moleculetest.Platform, a chat.Answerer) (m *Inbox, stop func()) {
	t.Helper()
	log, _ := newTestLogger(t)
	return bubbleInbox(t, p, t.TempDir(), a, func(cfg *Config) { cfg.Logger = log })
}

// A message the pool answers busy (no slot) is not answered "busy": its row stays unacknowledged
// and Submit is tried again with growing waits, and once a slot frees the message gets its real
// answer, once.
func TestBusyMessageRetriedUntilSlotFrees(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	synctest.Test(t, func(t *testing.T) {
		a := newBusyAnswerer(supervisor.ErrNoSlot)
		m, stop := runBubble(t, p, a)
		id := p.Enqueue(moleculetest.CanvasMessage("hi"))[0]

		time.Sleep(30 * time.Second)
		tries := a.attempts()
		// Waits from 1 s growing ×1.5 (±50%) toward 30 s: about six tries in 30 s. A loop
		// without backoff would make thousands.
		if len(tries) < 3 || len(tries) > 12 {
			t.Fatalf("%d Submits in 30 s of busy answers, want a handful (backoff)", len(tries))
		}
		if first := tries[1].Sub(tries[0]); first < DefaultRetryInitial/2 {
			t.Errorf("first retry after %v, want at least %v", first, DefaultRetryInitial/2)
		}
		if n := len(p.Notifies()); n != 0 {
			t.Fatalf("%d replies while the pool was busy, want none: %+v", n, p.Notifies())
		}
		s := m.Stats()
		if s.Unacked != 1 || s.Cursor == id || s.BusyRetries != int64(len(tries)) || s.Answered != 0 {
			t.Fatalf("stats while busy = %+v, want the row unacked and %d busy retries", s, len(tries))
		}

		close(a.free)
		time.Sleep(2 * DefaultRetryMax)
		got := p.Notifies()
		if len(got) != 1 || got[0].Message != "echo: hi" {
			t.Fatalf("replies after the slot freed = %+v, want the answer once", got)
		}
		s = m.Stats()
		if s.Cursor != id || s.Unacked != 0 || s.CodexFailures != 0 || s.Answered != 1 {
			t.Fatalf("stats after the answer = %+v", s)
		}
		stop()
	})
}

// Busy answers (no slot, a chat's queue full, codex overloaded) are retried for BusyRetryFor;
// after that the message is answered with the busy text as before, and its row is acknowledged:
// the user hears about it and nothing is lost or left behind.
func TestBusyMessageAnsweredBusyAfterBound(t *testing.T) {
	t.Parallel()
	for name, err := range map[string]error{
		"no slot":    fmt.Errorf("waited 30s for one of 4 codex slots: %w", supervisor.ErrNoSlot),
		"queue full": supervisor.ErrQueueFull,
		"overloaded": fmt.Errorf("turn/start on codex pid 7: %w", appserver.ErrOverloaded),
	} {
		t.Run(name, func(t *testing.T) {
			p := moleculetest.NewPlatform(t, moleculetest.Config{})
			synctest.Test(t, func(t *testing.T) {
				a := newBusyAnswerer(err)
				m, stop := runBubble(t, p, a)
				begin := time.Now()
				id := p.Enqueue(moleculetest.CanvasMessage("hi"))[0]

				// The last wait before the bound is at most RetryMax ×1.5 (jitter).
				time.Sleep(DefaultBusyRetryFor - 2*DefaultRetryMax)
				if n := len(p.Notifies()); n != 0 {
					t.Fatalf("answered busy after %v, before the bound %v", time.Since(begin), DefaultBusyRetryFor)
				}
				time.Sleep(3 * DefaultRetryMax)
				got := p.Notifies()
				if len(got) != 1 || got[0].Message != chat.ReplyText(supervisor.Reply{}, supervisor.ErrNoSlot) {
					t.Fatalf("replies after the bound = %+v, want the busy text once", got)
				}
				tries := a.attempts()
				if last := tries[len(tries)-1].Sub(tries[0]); last > DefaultBusyRetryFor {
					t.Errorf("last try %v after the first, past the bound %v", last, DefaultBusyRetryFor)
				}
				s := m.Stats()
				if s.Cursor != id || s.Unacked != 0 || s.Delivered != 1 || s.CodexFailures != 1 ||
					s.BusyRetries != int64(len(tries)-1) || len(tries) < 5 {
					t.Fatalf("stats after the busy reply = %+v after %d tries", s, len(tries))
				}
				stop()
			})
		})
	}
}

// Shutdown while a busy message waits for its next try: it is neither answered busy nor
// acknowledged, so the next run answers it.
func TestBusyMessageLeftForNextRunAtShutdown(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	synctest.Test(t, func(t *testing.T) {
		a := newBusyAnswerer(supervisor.ErrNoSlot)
		m, stop := runBubble(t, p, a)
		id := p.Enqueue(moleculetest.CanvasMessage("hi"))[0]
		time.Sleep(10 * time.Second)
		if len(a.attempts()) < 2 {
			t.Fatalf("%d tries in 10 s, want retries", len(a.attempts()))
		}
		stop()
		if n := len(p.Notifies()); n != 0 {
			t.Fatalf("%d replies at shutdown, want none: %+v", n, p.Notifies())
		}
		if s := m.Stats(); s.Cursor == id || s.Abandoned != 1 {
			t.Fatalf("stats after shutdown = %+v, want the row not acknowledged and counted abandoned", s)
		}
	})
}
