package main

import (
	"github.com/molecule-ai/codex-warm/cmd/internal/harness"
	"github.com/molecule-ai/codex-warm/supervisor"
)

func sample(d harness.StatusDoc) Sample {
	return Sample{Goroutines: d.Daemon.Goroutines, RSSBytes: d.Daemon.RSSBytes, HeapBytes: d.Daemon.HeapBytes}
}

// idle reports a daemon with nothing in flight: no unfinished rows, no pending replies, no
// running turns; with children too, no live codex child but its spares, all of them ready
// (--spares): a spare holds goroutines, so a baseline taken before it started would not compare
// with an end sample taken after.
func idle(d harness.StatusDoc, children bool, spares int) bool {
	b := d.Bridge
	if b == nil || b.Unacked != 0 || b.PendingReplies != 0 || b.InFlight != 0 {
		return false
	}
	if !children {
		return true
	}
	ready := 0
	for _, c := range d.Snapshot.Children {
		if c.State == supervisor.StateSpare {
			ready++
		}
	}
	return d.Snapshot.Totals.Live == spares && ready == spares
}
