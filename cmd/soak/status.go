package main

import "github.com/molecule-ai/codex-warm/cmd/internal/harness"

func sample(d harness.StatusDoc) Sample {
	return Sample{Goroutines: d.Daemon.Goroutines, RSSBytes: d.Daemon.RSSBytes, HeapBytes: d.Daemon.HeapBytes}
}

// idle reports a daemon with nothing in flight: no unfinished rows, no pending replies, no
// running turns; with children too, no live codex child.
func idle(d harness.StatusDoc, children bool) bool {
	b := d.Bridge
	if b == nil || b.Unacked != 0 || b.PendingReplies != 0 || b.InFlight != 0 {
		return false
	}
	// Spares (--spares) stay while the daemon is idle: they serve no chat.
	return !children || d.Snapshot.Totals.Live == d.Snapshot.Totals.Spares
}
