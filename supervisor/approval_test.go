package supervisor

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/molecule-ai/codex-warm/internal/protocol"

	"github.com/molecule-ai/codex-warm/supervisor/turnwatch"
)

// watchdogCfg is the case: a 90 s post-tool watch and a 2 min turn deadline.
func watchdogCfg(c *Config) {
	c.PostToolQuiet = 90 * time.Second
	c.TurnDeadline = 2 * time.Minute
}

// TestApprovalPausesWatchdogs: a person taking 5 minutes to answer, with a 90 s post-tool watch
// and a 2 min turn deadline, trips neither; the answer reaches codex and the turn completes on
// the same child.
func TestApprovalPausesWatchdogs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		decision string
	}{{protocol.DecisionAccept}, {protocol.DecisionAcceptForSession}, {protocol.DecisionDecline}} {
		t.Run(tc.decision, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeWorld()
				s := newSup(t, w, watchdogCfg)
				defer shutdown(t, s)
				r1 := mustSubmit(t, s, "a", "hello")
				start := time.Now()
				p := submitAsync(context.Background(), s, "a", "ask")
				a, err := s.WaitApproval(context.Background(), "a", 0)
				if err != nil {
					t.Fatal(err)
				}
				if a.ChatKey != "a" || a.Command != "make test" || a.RequestID != "0" || a.Seq == 0 ||
					a.Expires.Sub(a.Asked) != DefaultApprovalTimeout {
					t.Fatalf("approval %+v", a)
				}
				if got, ok := s.PendingApproval("a"); !ok || got.Seq != a.Seq {
					t.Fatalf("PendingApproval = %+v, %v", got, ok)
				}
				time.Sleep(5 * time.Minute)
				synctest.Wait()
				if p.finished() {
					r, err := p.wait()
					t.Fatalf("turn ended while the person was deciding: %+v, %v", r, err)
				}
				if _, err := s.Answer("a", 0, tc.decision); err != nil {
					t.Fatal("Answer found nothing to answer")
				}
				r, err := p.wait()
				if err != nil || r.Text != "decision: "+tc.decision || r.PID != r1.PID {
					t.Fatalf("reply %+v, %v", r, err)
				}
				if d := time.Since(start); d != 5*time.Minute {
					t.Errorf("turn took %s, want the 5 minutes the person took", d)
				}
				if _, ok := s.PendingApproval("a"); ok {
					t.Error("approval still pending after the answer")
				}
				if _, err := s.Answer("a", 0, tc.decision); err == nil {
					t.Error("a second answer found an approval")
				}
				if st := s.Status(); st.Totals.Live != 1 || len(st.Totals.Retired) != 0 {
					t.Errorf("totals %+v", st.Totals)
				}
			})
		})
	}
}

// TestApprovalTimeoutDeclines: nobody answering within ApprovalTimeout declines the request,
// and the turn goes on to complete without a watchdog.
func TestApprovalTimeoutDeclines(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, func(c *Config) {
			watchdogCfg(c)
			c.ApprovalTimeout = 3 * time.Minute
		})
		defer shutdown(t, s)
		start := time.Now()
		r, err := s.Submit(context.Background(), "a", "ask")
		if err != nil || r.Text != "decision: decline" {
			t.Fatalf("reply %+v, %v", r, err)
		}
		if d := time.Since(start); d != 3*time.Minute {
			t.Errorf("declined after %s, want 3m", d)
		}
		if _, ok := s.PendingApproval("a"); ok {
			t.Error("approval still pending after the timeout")
		}
	})
}

// TestApprovalPauseKeepsDeadline: the deadline is paused, not reset: the minute worked before the
// approval counts, the 5 minutes of waiting do not, so a turn that then hangs trips the 2 min
// deadline 1 minute after the answer.
func TestApprovalPauseKeepsDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, watchdogCfg)
		defer shutdown(t, s)
		start := time.Now()
		p := submitAsync(context.Background(), s, "a", "ask-late")
		if _, err := s.WaitApproval(context.Background(), "a", 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Minute)
		if _, err := s.Answer("a", 0, protocol.DecisionAccept); err != nil {
			t.Fatal(err)
		}
		_, err := p.wait()
		var we *WatchdogError
		if !errors.As(err, &we) || we.Watchdog != WatchdogTurn {
			t.Fatalf("err %v, want the turn deadline", err)
		}
		if d := time.Since(start); d != 7*time.Minute {
			t.Errorf("tripped after %s, want 7m (1m work + 5m paused + 1m left)", d)
		}
	})
}

// TestWaitingOnUserInputPausesWatchdogs: codex's own waitingOnUserInput flag pauses the
// watchdogs too, without any approval of ours.
func TestWaitingOnUserInputPausesWatchdogs(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, watchdogCfg)
		defer shutdown(t, s)
		p := submitAsync(context.Background(), s, "a", "ask-input:g")
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		if p.finished() {
			_, err := p.wait()
			t.Fatalf("turn ended while waiting on user input: %v", err)
		}
		w.open("g")
		if r, err := p.wait(); err != nil || r.Status != protocol.TurnCompleted {
			t.Fatalf("reply %+v, %v", r, err)
		}
	})
}

// TestApprovalStopEndsWait: /stop while an approval waits ends the wait and the turn.
func TestApprovalStopEndsWait(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, watchdogCfg)
		defer shutdown(t, s)
		p := submitAsync(context.Background(), s, "a", "ask")
		if _, err := s.WaitApproval(context.Background(), "a", 0); err != nil {
			t.Fatal(err)
		}
		if res := s.Stop("a"); !res.Interrupted {
			t.Fatalf("Stop: %+v", res)
		}
		if _, err := p.wait(); !errors.Is(err, ErrStopped) {
			t.Fatalf("err %v, want ErrStopped", err)
		}
		if _, ok := s.PendingApproval("a"); ok {
			t.Error("approval still pending after /stop")
		}
	})
}

// TestPostToolCountsEveryNotification: after a tool completed, any notification of the thread
// is activity, not only items; with none the watch trips after exactly quiet.
func TestPostToolCountsEveryNotification(t *testing.T) {
	t.Parallel()
	tool := protocol.Notification{Method: protocol.NotifyItemCompleted,
		Params: []byte(`{"threadId":"t","turnId":"u","item":{"type":"commandExecution","id":"c","status":"completed"}}`)}
	for _, n := range []protocol.Notification{
		{Method: "item/reasoning/summaryTextDelta", Params: []byte(`{"threadId":"t","turnId":"u","delta":"hm"}`)},
		{Method: protocol.NotifyTokenUsageUpdated, Params: []byte(`{"threadId":"t","turnId":"u"}`)},
		{Method: protocol.NotifyThreadStatus, Params: []byte(`{"threadId":"t","status":{"type":"active","activeFlags":[]}}`)},
		{Method: protocol.NotifyItemStarted, Params: []byte(`{"threadId":"t","turnId":"u","item":{"type":"reasoning","id":"r"}}`)},
		{}, // none: trips
	} {
		t.Run(n.Method, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tripped := make(chan error, 1)
				w := turnwatch.New(0, 90*time.Second, -1, func(err error) {
					tripped <- err
				})
				defer w.Stop()
				w.Observe(tool)
				time.Sleep(80 * time.Second)
				if n.Method != "" {
					w.Observe(n)
				}
				time.Sleep(10 * time.Minute)
				synctest.Wait()
				select {
				case err := <-tripped:
					var trip *turnwatch.TripError
					if n.Method != "" || !errors.As(err, &trip) || trip.Watchdog != WatchdogPostTool {
						t.Fatalf("tripped: %v", err)
					}
				default:
					if n.Method == "" {
						t.Fatal("no trip without any notification after the tool")
					}
				}
			})
		})
	}
}
