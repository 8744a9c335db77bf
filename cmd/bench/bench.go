package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// bench holds what the comparisons share: configuration, scratch space, and the results they
// add to. The comparisons run one after another, never concurrently, so it needs no lock.
type bench struct {
	cfg  Config
	ws   *workspace
	tick time.Duration // /proc clock tick
	log  io.Writer     // progress lines (stderr)
	rows []row
	sum  *summary

	flags map[string]bool // flags of `supervisor run`, read once by daemonFlags
	path  netPath         // how codex reaches the mock model in the comparison running now
}

// daemonFlags returns the flags `supervisor run` accepts, reading them on first use.
func (b *bench) daemonFlags(ctx context.Context) (map[string]bool, error) {
	if b.flags == nil {
		f, err := runFlags(ctx, b.cfg.SupervisorBin)
		if err != nil {
			return nil, err
		}
		b.flags = f
	}
	return b.flags, nil
}

// noSpares is the --spares setting of a daemon that must run without spare children: 0, or nil
// (the flag left out) for a daemon that has none.
func (b *bench) noSpares(ctx context.Context) (*int, error) {
	f, err := b.daemonFlags(ctx)
	if err != nil || !f["spares"] {
		return nil, err
	}
	return ptr(0), nil
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.log, "bench: "+format+"\n", args...)
}

func (b *bench) addRow(comparison, metric, aName string, a float64, bName string, bv float64, ratioLabel string, r float64) {
	ratio := ratioCell(r)
	if ratio != "-" && ratioLabel != "" {
		ratio += " " + ratioLabel
	}
	b.rows = append(b.rows, row{Path: b.path.Name, Comparison: comparison, Metric: metric, A: sideCell(aName, a), B: sideCell(bName, bv), Ratio: ratio})
}

// addNote adds a table line that is not a two-sided measurement.
func (b *bench) addNote(comparison, metric, value string) {
	b.rows = append(b.rows, row{Path: b.path.Name, Comparison: comparison, Metric: metric, Note: value})
}

// model is a running mock model that codex homes can be pointed at.
type model interface {
	WriteCodexHome(dir string) error
	// TakeMaxInFlight returns the most model requests answered at once since the mock started
	// or since the last call, and starts a new mark.
	TakeMaxInFlight() (int, error)
	// Steps returns the mock's timeline so far: connections, upgrades, requests, first bytes.
	Steps() ([]mockmodel.Event, error)
	Close() error
}

// newMock starts a mock model with the given per-response latency on the current network
// path: in a subprocess by default, in the bench process with --mock-in-process.
func (b *bench) newMock(latency time.Duration) (model, error) {
	if b.cfg.MockInProcess {
		return startPathModel(latency, b.path, b.ws.caFile())
	}
	return startMockProc(latency, b.path, b.ws.caFile(), b.ws.markerEnv(), b.log)
}

// alternate runs n pairs of a and b, flipping which goes first every pair (A B, B A, A B, …), so
// that a drift in the machine's load, and any order effect, hits both sides alike.
func alternate(n int, a, b func(i int) error) error {
	for i := range n {
		first, second := a, b
		if i%2 == 1 {
			first, second = b, a
		}
		if err := first(i); err != nil {
			return err
		}
		if err := second(i); err != nil {
			return err
		}
	}
	return nil
}

// daemonConfig is the configuration of a daemon for side with a cap of maxChildren and the
// given --spares (nil: the flag left out).
func (b *bench) daemonConfig(s side, maxChildren int, spares *int) daemonConfig {
	return daemonConfig{
		SupervisorBin: b.cfg.SupervisorBin,
		CodexBin:      b.cfg.CodexBin,
		Side:          s,
		MaxChildren:   maxChildren,
		Spares:        spares,
		Marker:        b.ws.markerEnv(),
	}
}

// withDaemon starts a daemon for side with a cap of maxChildren and the daemon's default spares,
// runs fn, and stops the daemon, reporting fn's error first.
func (b *bench) withDaemon(ctx context.Context, s side, maxChildren int, fn func(d *daemon) error) error {
	return b.withDaemonConfig(ctx, b.daemonConfig(s, maxChildren, nil), fn)
}

// withDaemonConfig starts a daemon configured by cfg, runs fn, and stops the daemon, reporting
// fn's error first.
func (b *bench) withDaemonConfig(ctx context.Context, cfg daemonConfig, fn func(d *daemon) error) error {
	d, err := startDaemon(ctx, cfg)
	if err != nil {
		return err
	}
	err = fn(d)
	if stopErr := d.stop(); stopErr != nil {
		if err == nil {
			return stopErr
		}
		b.logf("also: %v", stopErr)
	}
	return err
}
