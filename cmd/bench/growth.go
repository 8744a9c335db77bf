package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/molecule-ai/codex-warm/internal/childproc"
)

// growthKnownChats are the chats the daemon's state directory knows before the growth
// comparison's warm chat starts: a new install and one that has seen a thousand chats. The
// summary keys name them.
var growthKnownChats = []int{2, 1000}

// runGrowth is comparison 9b: what one warm turn costs the daemon as the number of chats its
// state directory has seen grows. The state directory is seeded with the sessions.json and
// usage.json such a daemon leaves, then one chat runs turns; the daemon process's own write(2)
// bytes (wchar: state files, log lines, the pipe to its child, the HTTP answer) and its own CPU
// (its children's excluded) are divided by the turns. Neither may grow with the chats known.
// CODEX_HOME's growth per turn is codex's (its SQLite WAL files left out), reported beside it.
func (b *bench) runGrowth(ctx context.Context) error {
	const name = labelGrowth
	mock, err := b.newMock(0)
	if err != nil {
		return err
	}
	defer mock.Close()
	spares, err := b.noSpares(ctx)
	if err != nil {
		return err
	}
	n := b.cfg.GrowthTurns
	b.logf("growth: %d warm turns at %v known chats", n, growthKnownChats)
	for _, known := range growthKnownChats {
		s, err := b.ws.newSide(fmt.Sprintf("growth-%d", known), mock)
		if err != nil {
			return err
		}
		cfg := b.daemonConfig(s, 2, spares)
		if err := seedStateDir(cfg.stateDir(), known); err != nil {
			return fmt.Errorf("growth: %w", err)
		}
		var wrote, home int64
		var cpu time.Duration
		err = b.withDaemonConfig(ctx, cfg, func(d *daemon) error {
			const key = "canvas:bench-growth"
			for i := range 2 { // the child starts and the thread is recorded: not a warm turn
				if _, _, err := d.post(ctx, key, fmt.Sprintf("growth warm-up %d", i+1)); err != nil {
					return err
				}
			}
			w0, c0, h0, err := daemonCounters(d, s.codexHome, b.tick)
			if err != nil {
				return err
			}
			for i := range n {
				if _, _, err := d.post(ctx, key, fmt.Sprintf("growth turn %d", i+1)); err != nil {
					return err
				}
			}
			w1, c1, h1, err := daemonCounters(d, s.codexHome, b.tick)
			wrote, cpu, home = w1-w0, c1-c0, h1-h0
			return err
		})
		if err != nil {
			return fmt.Errorf("growth at %d known chats: %w", known, err)
		}
		perTurn, cpuMS, homePerTurn := float64(wrote)/float64(n), ms(cpu)/float64(n), float64(home)/float64(n)
		b.addNote(name, fmt.Sprintf("%d known chats, per warm turn (%d turns)", known, n),
			fmt.Sprintf("daemon writes %s B (write(2), all files, pipes and sockets), daemon CPU %s ms; CODEX_HOME grows %s B (without SQLite WAL files)",
				fmtFloat(perTurn), fmtFloat(cpuMS), fmtFloat(homePerTurn)))
		b.sum.set(fmt.Sprintf("growth_daemon_write_bytes_per_turn_%d", known), perTurn)
		b.sum.set(fmt.Sprintf("growth_daemon_cpu_ms_per_turn_%d", known), cpuMS)
		b.sum.set(fmt.Sprintf("growth_codex_home_bytes_per_turn_%d", known), homePerTurn)
	}
	return nil
}

// daemonCounters reads the daemon's write(2) bytes and CPU so far (the daemon alone) and the
// size of codexHome.
func daemonCounters(d *daemon, codexHome string, tick time.Duration) (wchar int64, cpu time.Duration, home int64, err error) {
	if wchar, err = (childproc.ProcFS{}).WriteChars(d.pid); err != nil {
		return 0, 0, 0, err
	}
	st, err := readProcStat(d.pid)
	if err != nil {
		return 0, 0, 0, err
	}
	home, err = dirBytes(codexHome)
	return wchar, time.Duration(st.UTime+st.STime) * tick, home, err
}

// dirBytes is the sum of the sizes of the regular files under dir, SQLite's write-ahead logs
// and shared-memory files left out: they fill up to a bound (about 4 MB each) within the first
// hundred turns and are then reused, which would swamp what a turn adds for good.
func dirBytes(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if name := e.Name(); e.Type().IsRegular() && !strings.HasSuffix(name, "-wal") && !strings.HasSuffix(name, "-shm") {
			fi, err := e.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	return n, err
}

// seedStateDir writes the sessions.json and usage.json a daemon that has seen known chats leaves
// behind (their threads are not in CODEX_HOME: no message of the comparison goes to them).
func seedStateDir(dir string, known int) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	type usage struct {
		InputTokens       int64 `json:"input_tokens"`
		CachedInputTokens int64 `json:"cached_input_tokens"`
		OutputTokens      int64 `json:"output_tokens"`
		TotalTokens       int64 `json:"total_tokens"`
		Turns             int64 `json:"turns"`
	}
	threads := make(map[string]string, known)
	chats := make(map[string]usage, known)
	for i := range known {
		k := fmt.Sprintf("canvas:%08d-0000-4000-8000-000000000000", i)
		threads[k] = fmt.Sprintf("019a%04x-0000-7000-8000-000000000000", i)
		chats[k] = usage{InputTokens: 123456, CachedInputTokens: 100000, OutputTokens: 2345, TotalTokens: 125801, Turns: 42}
	}
	for file, v := range map[string]any{"sessions.json": threads, "usage.json": map[string]any{"chats": chats}} {
		data, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o600); err != nil {
			return fmt.Errorf("seed %s: %w", file, err)
		}
	}
	return nil
}
