package supervisor

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver/appservertest"
	"github.com/molecule-ai/codex-warm/internal/atomicfile"
	"github.com/molecule-ai/codex-warm/internal/childproc"
	"github.com/molecule-ai/codex-warm/projector"
	"github.com/molecule-ai/codex-warm/sessions"
)

// BenchmarkWarmTurnBytesWritten measures what one warm turn writes when the state directory
// already knows 2 and 1,000 chats: write-B/turn is every byte the process handed to write(2)
// (/proc/self/io wchar: the state files, and the JSON-RPC to the fake app-server child, which
// may grow with the number of chats.
func BenchmarkWarmTurnBytesWritten(b *testing.B) {
	for _, chats := range []int{2, 1000} {
		b.Run(fmt.Sprintf("chats=%d", chats), func(b *testing.B) {
			ctx := context.Background()
			dir := b.TempDir()
			seedKnownChats(b, dir, chats)
			store, err := sessions.Open(sessions.Config{Dir: dir})
			if err != nil {
				b.Fatal(err)
			}
			s, err := New(Config{
				Spawn:    (&fakeSpawner{modeFor: func(int) string { return appservertest.FakeOK }, log: zap.NewNop()}).spawn,
				Logger:   zap.NewNop(),
				Store:    store,
				StateDir: dir,
			})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Shutdown(ctx)
			const key = "canvas:warm"
			if _, err := s.Submit(ctx, key, "warm up"); err != nil {
				b.Fatal(err)
			}
			w0, u0, c0 := wchar(b), s.usage.Written(), cpuTime(b)
			n := 0
			for b.Loop() {
				if _, err := s.Submit(ctx, key, "hi"); err != nil {
					b.Fatal(err)
				}
				n++
			}
			b.ReportMetric(float64(cpuTime(b)-c0)/float64(n)/1e3, "cpu-µs/turn")
			b.ReportMetric(float64(wchar(b)-w0)/float64(n), "write-B/turn")
			b.ReportMetric(float64(s.usage.Written()-u0)/float64(n), "usage-B/turn")
		})
	}
}

// seedKnownChats writes sessions.json and usage.json as a daemon that has seen n chats leaves
// them (usage.json in the whole-file shape every version reads).
func seedKnownChats(tb testing.TB, dir string, n int) {
	tb.Helper()
	threads := make(map[string]string, n)
	rec := struct {
		Chats map[string]ChatUsage `json:"chats"`
	}{Chats: make(map[string]ChatUsage, n)}
	for i := range n {
		k := fmt.Sprintf("canvas:%08d-0000-4000-8000-000000000000", i)
		threads[k] = fmt.Sprintf("019a%04x-0000-7000-8000-000000000000", i)
		rec.Chats[k] = ChatUsage{Usage: projector.Usage{InputTokens: 123456, CachedInputTokens: 100000, OutputTokens: 2345, TotalTokens: 125801}, Turns: 42}
	}
	for name, v := range map[string]any{sessions.DefaultFileName: threads, UsageFile: rec} {
		data, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			tb.Fatal(err)
		}
		if err := atomicfile.WriteFile(filepath.Join(dir, name), data, atomicfile.Options{}); err != nil {
			tb.Fatal(err)
		}
	}
}

// wchar is the bytes this process has passed to write(2) and friends so far.
func wchar(tb testing.TB) int64 {
	tb.Helper()
	n, err := childproc.ProcFS{}.WriteChars(os.Getpid())
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// cpuTime is the CPU time (user and system) this process has used so far, in nanoseconds.
func cpuTime(tb testing.TB) int64 {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
