package metrics

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/molecule-ai/codex-warm/internal/metrics/metricstest"
)

// The folder sizes are the last sample's, not a walk at the scrape: a file written after a
// sample shows at the next one. The oldest idle chat is reported in seconds with no chat label.
func TestDirSizesSampledAndOldestIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		home, state := t.TempDir(), t.TempDir()
		write := func(dir, name string, n int) {
			t.Helper()
			if err := os.MkdirAll(filepath.Join(dir, "sessions"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "sessions", name), make([]byte, n), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		write(home, "rollout-1.jsonl", 1000)
		write(state, "sessions.json", 60)
		s := NewDirSampler(DirSamplerConfig{Dirs: map[string]string{DirCodexHome: home, DirState: state}, Every: time.Minute})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); s.Run(ctx) }()
		synctest.Wait()

		var src fakeSource
		m := New(Config{Status: src.status, DirSizes: s.Sizes, NoRuntime: true,
			OldestIdle: func() (time.Duration, bool) { return 90 * time.Minute, true }})
		value := func(dir string) float64 {
			return scrape(t, m).MustValue(t, "codex_warm_dir_bytes", metricstest.Labels{"dir": dir})
		}
		if h, st := value(DirCodexHome), value(DirState); h != 1000 || st != 60 {
			t.Fatalf("dir_bytes codex_home %v, state %v; want 1000 and 60", h, st)
		}
		write(home, "rollout-2.jsonl", 500)
		if h := value(DirCodexHome); h != 1000 {
			t.Errorf("dir_bytes codex_home %v before the next sample, want the last sample's 1000", h)
		}
		time.Sleep(time.Minute) // the fake clock of the bubble: the next sample is due
		synctest.Wait()
		if h := value(DirCodexHome); h != 1500 {
			t.Errorf("dir_bytes codex_home %v after the next sample, want 1500", h)
		}
		if v := scrape(t, m).MustValue(t, "codex_warm_oldest_idle_chat_seconds", nil); v != 5400 {
			t.Errorf("oldest idle %v s, want 5400", v)
		}
		cancel()
		<-done
	})
}
