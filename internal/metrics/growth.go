package metrics

// What grows on disk over months of operation (docs/disk-and-growth.md): the size of CODEX_HOME
// and of the state directory, and how long the chat idle the longest has been idle.

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Labels of codex_warm_dir_bytes' "dir".
const (
	DirCodexHome = "codex_home"
	DirState     = "state"
)

// DefaultDirSampleEvery is how often DirSampler walks its folders. CODEX_HOME holds a rollout
// file per thread and grows by kilobytes per turn: a size five minutes old is current enough for
// a disk alert, and a walk of a large CODEX_HOME on every scrape would not be cheap.
const DefaultDirSampleEvery = 5 * time.Minute

var (
	descDirBytes   = desc("dir_bytes", "Size of the files under a folder the daemon or codex writes (dir: codex_home, state), sampled every few minutes rather than at the scrape.", "dir")
	descOldestIdle = desc("oldest_idle_chat_seconds", "Time since the last turn of the chat that has gone longest without one (of the chats whose token usage is kept).")
)

// DirSamplerConfig configures NewDirSampler.
type DirSamplerConfig struct {
	// Dirs maps a "dir" label (DirCodexHome, DirState) to the folder to measure.
	Dirs map[string]string
	// Every is the time between walks; zero means DefaultDirSampleEvery.
	Every time.Duration
	// Logger gets walk failures (at Debug: a folder that is not there yet is normal); nil: none.
	Logger *zap.Logger
}

// DirSampler measures the size of a few folders in the background, so that a scrape reads the
// last sample instead of walking them.
type DirSampler struct {
	cfg DirSamplerConfig
	log *zap.Logger

	mu    sync.Mutex
	sizes map[string]int64
}

// NewDirSampler returns a sampler that has not measured anything yet; Run measures.
func NewDirSampler(cfg DirSamplerConfig) *DirSampler {
	if cfg.Every <= 0 {
		cfg.Every = DefaultDirSampleEvery
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return &DirSampler{cfg: cfg, log: cfg.Logger.Named("metrics"), sizes: map[string]int64{}}
}

// Run measures at once and then every Every until ctx is done.
func (s *DirSampler) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Every)
	defer t.Stop()
	for {
		s.sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *DirSampler) sample(ctx context.Context) {
	for _, label := range slices.Sorted(maps.Keys(s.cfg.Dirs)) {
		n, err := dirSize(ctx, s.cfg.Dirs[label])
		if err != nil {
			s.log.Debug("cannot measure a folder", zap.String("dir", s.cfg.Dirs[label]), zap.Error(err))
			continue
		}
		s.mu.Lock()
		s.sizes[label] = n
		s.mu.Unlock()
	}
}

// Sizes is the last size measured of each folder, by label; a folder not measured yet is absent.
func (s *DirSampler) Sizes() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.sizes)
}

// dirSize sums the sizes of the regular files under dir, without following links. Files that
// vanish during the walk (codex prunes its logs) are skipped.
func dirSize(ctx context.Context, dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path != dir {
				return nil
			}
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !e.Type().IsRegular() {
			return nil
		}
		fi, err := e.Info()
		if err == nil {
			n += fi.Size()
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	})
	return n, err
}

// growthCollector reads the sampler's sizes and the oldest idle chat at scrape time.
type growthCollector struct {
	sizes      func() map[string]int64
	oldestIdle func() (time.Duration, bool)
}

func (c *growthCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descDirBytes
	ch <- descOldestIdle
}

func (c *growthCollector) Collect(ch chan<- prometheus.Metric) {
	if c.sizes != nil {
		sizes := c.sizes()
		for _, label := range slices.Sorted(maps.Keys(sizes)) {
			ch <- prometheus.MustNewConstMetric(descDirBytes, prometheus.GaugeValue, float64(sizes[label]), label)
		}
	}
	if c.oldestIdle != nil {
		if d, ok := c.oldestIdle(); ok {
			ch <- prometheus.MustNewConstMetric(descOldestIdle, prometheus.GaugeValue, d.Seconds())
		}
	}
}
