package main

import (
	"context"
	"fmt"
	"math"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/chatfiles"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// runOverhead is comparison 2: what the daemon adds to a turn. The same kind of child (real
// codex, same mock model) runs turns once behind the whole daemon (HTTP in, supervisor, reply
// out) and once behind a bare appserver client. Both are warmed up first; then turns alternate.
// The overhead is the median of the paired differences (daemon turn i minus bare turn i), which
// cancels load drift better than a difference of medians; both are shown.
func (b *bench) runOverhead(ctx context.Context) error {
	const name = labelOverhead
	mock, err := b.newMock(0)
	if err != nil {
		return err
	}
	defer mock.Close()
	daemonSide, err := b.ws.newSide("overhead-daemon", mock)
	if err != nil {
		return err
	}
	bareSide, err := b.ws.newSide("overhead-bare", mock)
	if err != nil {
		return err
	}
	n, warmup := b.cfg.OverheadTurns, b.cfg.OverheadWarmup
	b.logf("overhead: %d warm-up + %d measured turns per side, daemon vs bare client (alternating)", warmup, n)

	var daemonMS, bareMS, reportedMS []float64
	err = b.withDaemon(ctx, daemonSide, 2, func(d *daemon) error {
		// The bare client runs codex as the daemon runs its children: with the lean settings and
		// the daemon's send_file tool, whose declaration goes with every model request.
		var lean []string
		for _, s := range appserver.LeanSettings() {
			lean = append(lean, s.Override())
		}
		bare, err := startWarm(ctx, warmConfig{Bin: b.cfg.CodexBin, Side: bareSide, ConfigOverrides: lean,
			DynamicTools: []protocol.DynamicToolSpec{chatfiles.Tool()}}, "")
		if err != nil {
			return err
		}
		defer bare.close()
		const key = "canvas:bench-overhead"
		for i := range warmup {
			text := fmt.Sprintf("overhead warm-up %d", i+1)
			if _, _, err := d.post(ctx, key, text); err != nil {
				return err
			}
			if _, err := bare.send(ctx, text); err != nil {
				return err
			}
		}
		return alternate(n, func(i int) error {
			reply, wall, err := d.post(ctx, key, fmt.Sprintf("overhead turn %d", i+1))
			if err != nil {
				return err
			}
			daemonMS = append(daemonMS, ms(wall))
			reportedMS = append(reportedMS, reply.TurnMS)
			return nil
		}, func(i int) error {
			wall, err := bare.send(ctx, fmt.Sprintf("overhead turn %d", i+1))
			if err != nil {
				return err
			}
			bareMS = append(bareMS, ms(wall))
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("overhead: %w", err)
	}

	diffs := make([]float64, len(daemonMS))
	for i := range diffs {
		diffs[i] = daemonMS[i] - bareMS[i]
	}
	dMed, bMed := median(daemonMS), median(bareMS)
	overMS := median(diffs)
	ciLo, ciHi := medianCI(diffs)
	overPct := overMS / bMed * 100
	// What the daemon adds around the turn, from the same samples: its HTTP wall minus the turn
	// duration it reports in Server-Timing (to the microsecond).
	var path []float64
	for i := range daemonMS {
		path = append(path, daemonMS[i]-reportedMS[i])
	}
	pathMS := mean(path)
	allowed, ok := overheadVerdict(overMS, bMed, b.cfg.OverheadAbsMS, b.cfg.OverheadPct)
	verdict := "FAIL"
	if ok {
		verdict = "PASS"
	}
	b.addRow(name, fmt.Sprintf("wall ms/turn, median of %d", n), "daemon", dMed, "bare", bMed, "daemon/bare", ratio(dMed, bMed))
	b.addNote(name, "overhead ms/turn (median of pairs)", fmt.Sprintf("%s ms = %s%%, 95%% CI [%s, %s] ms (difference of medians %s ms)",
		fmtFloat(overMS), fmtFloat(overPct), fmtFloat(ciLo), fmtFloat(ciHi), fmtFloat(dMed-bMed)))
	// The daemon reports the turn's duration as its appserver client measured it: what is left
	// of the wall time is HTTP, JSON and the supervisor's queueing.
	b.addNote(name, "HTTP + supervisor ms/turn (mean)", fmt.Sprintf("%s ms: daemon wall minus the turn duration it reports (Server-Timing)",
		fmtFloat(pathMS)))
	b.addNote(name, "HTTP + supervisor ms/turn (median)", fmtFloat(median(path))+" ms")
	b.addNote(name, "target", fmt.Sprintf("%s: overhead <= max(%s ms, %s%%) = %s ms%s",
		verdict, fmtFloat(b.cfg.OverheadAbsMS), fmtFloat(b.cfg.OverheadPct), fmtFloat(allowed), confidence(ciLo, ciHi, allowed)))
	b.sum.set("daemon_overhead_ms", overMS)
	b.sum.set("daemon_overhead_pct", overPct)
	b.sum.set("daemon_overhead_ok", ok)
	b.sum.set("daemon_overhead_ci_lo_ms", ciLo)
	b.sum.set("daemon_overhead_ci_hi_ms", ciHi)
	b.sum.set("daemon_path_ms", pathMS)
	b.sum.set("daemon_path_median_ms", median(path))
	b.sum.set("daemon_turn_ms", dMed)
	b.sum.set("bare_turn_ms", bMed)
	return nil
}

// confidence says whether the verdict holds across the median's confidence interval: on a noisy
// machine a verdict whose interval straddles the limit is a coin toss and is labelled so.
func confidence(lo, hi, allowed float64) string {
	switch {
	case math.IsNaN(lo) || math.IsNaN(hi):
		return " (too few samples for a confidence interval)"
	case hi <= allowed:
		return " (conclusive: the whole 95% CI is within the target)"
	case lo > allowed:
		return " (conclusive: the whole 95% CI is above the target)"
	default:
		return " (inconclusive: the 95% CI straddles the target; raise --overhead-turns)"
	}
}
