package account

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/molecule-ai/codex-warm/internal/protocol"
	"github.com/molecule-ai/codex-warm/projector"
)

func i64(n int64) *int64 { return &n }

// Parked callers wait for the reset and then go oldest first, one every spacing; a caller that
// arrives while they drain queues behind them.
func TestLimitParkOrderAndPacing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimits("", time.Second, zap.NewNop())
		start := time.Now()
		reset := start.Add(time.Hour)
		if e := l.Hit("canvas:a", reset); !e.ResetsAt.Equal(reset) || e.UnknownReset {
			t.Fatalf("hit = %+v", e)
		}
		if at, _, ok := l.Refusing(); !ok || !at.Equal(reset) {
			t.Fatalf("refusing = %v, %v", at, ok)
		}
		var (
			mu       sync.Mutex
			order    []string
			released []time.Duration
			wg       sync.WaitGroup
		)
		// Arrival order differs from call order: since decides.
		for _, c := range []struct {
			name  string
			since time.Duration
		}{{"c", 3}, {"a", 1}, {"b", 2}} {
			wg.Go(func() {
				if err := l.Await(context.Background(), c.name, start.Add(c.since*time.Second)); err != nil {
					t.Errorf("%s: %v", c.name, err)
				}
				l.Reached(c.name)
				mu.Lock()
				order = append(order, c.name)
				released = append(released, time.Since(start))
				mu.Unlock()
			})
		}
		synctest.Wait()
		if st := l.Status(); st.Parked != 3 || !st.Limited || st.Hits != 1 {
			t.Fatalf("status while parked: %+v", st)
		}
		mu.Lock()
		early := len(order)
		mu.Unlock()
		if early != 0 {
			t.Fatalf("%d released before the reset", early)
		}
		wg.Wait()
		if !slices.Equal(order, []string{"a", "b", "c"}) {
			t.Errorf("released %v, want oldest first", order)
		}
		want := []time.Duration{time.Hour, time.Hour + time.Second, time.Hour + 2*time.Second}
		if !slices.Equal(released, want) {
			t.Errorf("released at %v, want %v: one every spacing from the reset", released, want)
		}
		if _, _, ok := l.Refusing(); ok {
			t.Error("still refusing after the reset")
		}
	})
}

// A released turn that meets the limit again moves the reset; the others wait for the new one.
func TestLimitHitAgainMovesReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimits("", time.Second, zap.NewNop())
		start := time.Now()
		l.Hit("canvas:a", start.Add(time.Minute))
		done := make(chan time.Duration, 2)
		for i := range 2 {
			go func() {
				_ = l.Await(context.Background(), fmt.Sprint(i), start.Add(time.Duration(i)))
				done <- time.Since(start)
			}()
			synctest.Wait()
		}
		first := <-done
		if first != time.Minute {
			t.Fatalf("first released at %v", first)
		}
		l.Hit("0", start.Add(time.Hour)) // the first one's turn met it again
		if second := <-done; second != time.Hour {
			t.Errorf("second released at %v, want at the new reset", second)
		}
		if st := l.Status(); st.Hits != 2 {
			t.Errorf("hits %d, want 2", st.Hits)
		}
	})
}

// A caller whose context ends leaves the queue; a reset codex did not give is a retry later; a
// completed turn ends the limit at once.
func TestLimitCancelUnknownAndCleared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimits("", time.Second, zap.NewNop())
		e := l.Hit("peer:x", time.Time{})
		if !e.UnknownReset || time.Until(e.ResetsAt) != unknownResetRetry {
			t.Fatalf("unknown reset: %+v", e)
		}
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- l.Await(ctx, "k", time.Now()) }()
		synctest.Wait()
		cancel()
		if err := <-errc; err == nil {
			t.Error("a cancelled wait returned nil")
		}
		if st := l.Status(); st.Parked != 0 {
			t.Errorf("parked %d after cancel", st.Parked)
		}
		go func() { errc <- l.Await(context.Background(), "k", time.Now()) }()
		synctest.Wait()
		l.Cleared()
		if err := <-errc; err != nil {
			t.Error(err)
		}
		if st := l.Status(); st.Limited {
			t.Errorf("limited after a completed turn: %+v", st)
		}
	})
}

// Rate-limit reports merge sparsely, a window past 90 % is logged once, and nothing in a
// report with missing fields breaks anything.
func TestLimitUpdateMergesAndWarnsOnce(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	l := NewLimits("", time.Second, zap.New(core))
	l.Update(protocol.RateLimitSnapshot{Primary: &protocol.RateLimitWindow{UsedPercent: 50, WindowDurationMins: i64(300), ResetsAt: i64(1000)}})
	l.Update(protocol.RateLimitSnapshot{Primary: &protocol.RateLimitWindow{UsedPercent: 91}})
	l.Update(protocol.RateLimitSnapshot{Primary: &protocol.RateLimitWindow{UsedPercent: 95}})
	l.Update(protocol.RateLimitSnapshot{}) // nothing known: nothing changes
	st := l.Status()
	if st.Primary == nil || st.Primary.UsedPercent != 95 || st.Primary.WindowMinutes != 300 || st.Primary.ResetsAt.Unix() != 1000 || st.Secondary != nil {
		t.Errorf("merged %+v", st.Primary)
	}
	if n := logs.FilterMessage("a usage window of the account is nearly used up").Len(); n != 1 {
		t.Errorf("warned %d times, want once", n)
	}
	l.Update(protocol.RateLimitSnapshot{Primary: &protocol.RateLimitWindow{UsedPercent: 92, ResetsAt: i64(2000)}})
	if n := logs.FilterMessage("a usage window of the account is nearly used up").Len(); n != 2 {
		t.Errorf("a new window warned %d times in all, want 2", n)
	}
}

// The limit and the token totals survive a restart (a new state over the same dir); an
// unreadable usage file is moved aside, not overwritten.
func TestLimitAndUsagePersist(t *testing.T) {
	dir := t.TempDir()
	reset := time.Now().Add(time.Hour).Truncate(time.Second)
	l := NewLimits(dir, time.Second, zap.NewNop())
	l.Update(protocol.RateLimitSnapshot{Primary: &protocol.RateLimitWindow{UsedPercent: 100, ResetsAt: i64(reset.Unix())}})
	l.Hit("canvas:a", reset)
	u := NewUsage(dir, zap.NewNop())
	u.Add("canvas:a", projector.Usage{InputTokens: 10, CachedInputTokens: 4, OutputTokens: 3, ReasoningOutputTokens: 2, TotalTokens: 13})
	u.Add("canvas:a", projector.Usage{InputTokens: 1, OutputTokens: 1, TotalTokens: 2})

	l2 := NewLimits(dir, time.Second, zap.NewNop())
	if at, _, ok := l2.Refusing(); !ok || !at.Equal(reset) {
		t.Errorf("after restart: refusing = %v, %v; want %v", at, ok, reset)
	}
	if st := l2.Status(); st.Primary == nil || st.Primary.UsedPercent != 100 || st.Hits != 1 {
		t.Errorf("after restart: %+v", st)
	}
	got := NewUsage(dir, zap.NewNop()).Chat("canvas:a")
	if got.InputTokens != 11 || got.CachedInputTokens != 4 || got.OutputTokens != 4 || got.ReasoningOutputTokens != 2 || got.Turns != 2 {
		t.Errorf("after restart: %+v", got)
	}

	l2.Cleared()
	if _, _, ok := NewLimits(dir, time.Second, zap.NewNop()).Refusing(); ok {
		t.Error("a cleared limit came back after a restart")
	}

	if err := os.WriteFile(filepath.Join(dir, UsageFile), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if n := len(NewUsage(dir, zap.NewNop()).All()); n != 0 {
		t.Errorf("%d chats from a corrupt file", n)
	}
	if _, err := os.Stat(filepath.Join(dir, UsageFile+".corrupt")); err != nil {
		t.Errorf("corrupt file not moved aside: %v", err)
	}
}

// A released message that does not reach its turn holds the next one back until releaseBound,
// not forever.
func TestLimitReleaseWaitsForTheTurnOrTheBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimits("", time.Second, zap.NewNop())
		start := time.Now()
		l.Hit("canvas:a", start.Add(time.Minute))
		done := make(chan time.Duration, 2)
		for i := range 2 {
			go func() {
				_ = l.Await(context.Background(), fmt.Sprint(i), start.Add(time.Duration(i)))
				done <- time.Since(start)
			}()
			synctest.Wait()
		}
		if first := <-done; first != time.Minute {
			t.Fatalf("first released at %v", first)
		}
		if second := <-done; second != time.Minute+releaseBound {
			t.Errorf("second released at %v, want after the bound", second)
		}
	})
}
