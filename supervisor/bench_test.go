package supervisor

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/appserver/appservertest"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// BenchmarkSubmitOverhead compares one warm turn through the supervisor with the same turn on a
// bare appserver client, both against the fake app-server (same process kind). The difference
// is what the pool costs per message: queueing, the worker hand-off, watchdog timers, status
// bookkeeping.
func BenchmarkSubmitOverhead(b *testing.B) {
	ctx := context.Background()
	b.Run("bare-client", func(b *testing.B) {
		bin, env := appservertest.FakeCommand(appservertest.FakeOK)
		c, err := appserver.Start(ctx, appserver.Config{Bin: bin, Env: env})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		thread, err := c.StartThread(ctx, appserver.ThreadOptions{})
		if err != nil {
			b.Fatal(err)
		}
		input := []protocol.UserInput{{Type: "text", Text: "hi"}}
		for b.Loop() {
			if _, err := c.RunTurn(ctx, thread, input, appserver.TurnOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("supervisor", func(b *testing.B) {
		s, err := New(Config{
			Spawn:  (&fakeSpawner{modeFor: func(int) string { return appservertest.FakeOK }, log: zap.NewNop()}).spawn,
			Logger: zap.NewNop(),
		})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Shutdown(ctx)
		if _, err := s.Submit(ctx, "k", "warm up"); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := s.Submit(ctx, "k", "hi"); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The pool alone, on the in-memory child: no process, no JSON-RPC.
	b.Run("supervisor-in-memory-child", func(b *testing.B) {
		s, err := New(Config{Spawn: newFakeWorld().spawn, Logger: zap.NewNop()})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Shutdown(ctx)
		for b.Loop() {
			if _, err := s.Submit(ctx, "k", "hi"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDaemonMemoryPerChild measures the daemon's own memory (Go heap after GC plus goroutine
// stacks) per live session: the supervisor's bookkeeping plus the appserver client, with the
// fake app-server as the child. The child's own RSS is not included; Status reports it.
func BenchmarkDaemonMemoryPerChild(b *testing.B) {
	const n = 16
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		spawn func() SpawnFunc
	}{
		{"fake-app-server", func() SpawnFunc {
			return (&fakeSpawner{modeFor: func(int) string { return appservertest.FakeOK }, log: zap.NewNop()}).spawn
		}},
		{"in-memory-child", func() SpawnFunc { return newFakeWorld().spawn }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var heap, stack float64
			for b.Loop() {
				s, err := New(Config{Spawn: tc.spawn(), MaxChildren: n, Logger: zap.NewNop()})
				if err != nil {
					b.Fatal(err)
				}
				before := memNow()
				for i := range n {
					if _, err := s.Submit(ctx, fmt.Sprintf("k%d", i), "hi"); err != nil {
						b.Fatal(err)
					}
				}
				after := memNow()
				if got := s.Status().Totals.Live; got != n {
					b.Fatalf("live %d", got)
				}
				heap += float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
				stack += float64(int64(after.StackInuse)-int64(before.StackInuse)) / n
				if err := s.Shutdown(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(heap/float64(b.N), "heap-B/child")
			b.ReportMetric(stack/float64(b.N), "stack-B/child")
		})
	}
}

func memNow() runtime.MemStats {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m
}
