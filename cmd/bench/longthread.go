package main

import (
	"context"
	"fmt"
	"time"

	"github.com/molecule-ai/codex-warm/internal/childproc"
)

// longStage is what one stage of the long-thread comparison measured on a child.
type longStage struct {
	uss, pss   float64 // MB, after the stage's turns
	cpuMS      float64 // codex CPU per turn over the stage's turns
	resumeMS   float64 // spawn + initialize + thread/resume of the child (0: not a fresh child)
	compactMS  float64 // the compaction's wall time (0: none)
	turnsAfter int     // the thread's turns when measured
}

// runLongThread is comparison 10: a thread of LongTurns turns, and what codex's own compaction
// (thread/compact/start, the daemon's --compact-after-turns and --compact-above) changes. On a
// bare warm client, so the figures are codex's: the child's private memory (USS) and PSS, its
// CPU per turn over LongSample turns, and the time a fresh child takes to start and resume the
// thread, before compaction and after it. It runs on the first network path only: the figures are
// codex's memory and CPU, which the path does not change, and a few thousand turns take minutes.
func (b *bench) runLongThread(ctx context.Context) error {
	const name = labelLongThread
	if b.path.Name != b.cfg.Paths[0] {
		b.addNote(name, "skipped", "runs on the first path only ("+b.cfg.Paths[0]+")")
		return nil
	}
	mock, err := b.newMock(0)
	if err != nil {
		return err
	}
	defer mock.Close()
	s, err := b.ws.newSide("longthread", mock)
	if err != nil {
		return err
	}
	n, k := b.cfg.LongTurns, b.cfg.LongSample
	b.logf("long thread: building %d turns", n)
	w, err := startWarm(ctx, warmConfig{Bin: b.cfg.CodexBin, Side: s}, "")
	if err != nil {
		return err
	}
	turns := 0
	run := func(w *warmClient, count int) (cpuMS float64, err error) {
		c0, err := childCPU(w.pid(), b.tick)
		if err != nil {
			return 0, err
		}
		for range count {
			turns++
			if _, err := w.send(ctx, fmt.Sprintf("long turn %d", turns)); err != nil {
				return 0, err
			}
		}
		c1, err := childCPU(w.pid(), b.tick)
		return ms(c1-c0) / float64(count), err
	}
	measure := func(w *warmClient, st *longStage) error {
		m, err := childproc.ProcFS{}.Memory(w.pid())
		st.uss, st.pss, st.turnsAfter = float64(m.USS)/(1<<20), float64(m.PSS)/(1<<20), turns
		return err
	}
	// A thread has one writer: each child is closed before the next resumes the thread.
	var grown, fresh, compacted, freshAfter longStage
	stage := func(f func() error) {
		if err == nil {
			err = f()
		}
	}
	stage(func() error { _, err := run(w, n-k); return err })
	stage(func() error { grown.cpuMS, err = run(w, k); return err })
	stage(func() error { return measure(w, &grown) })
	if cerr := w.close(); err == nil {
		err = cerr
	}
	// A fresh child loads the same history (what recycling a child gives), runs k turns, then
	// compacts the thread and runs k more.
	var f *warmClient
	stage(func() error { f, err = b.longFresh(ctx, s, w.threadID, &fresh, run, measure, k); return err })
	stage(func() error {
		start := time.Now()
		r, err := f.client.CompactThread(ctx, f.threadID)
		compacted.compactMS = ms(time.Since(start))
		if err == nil && r.Status != "completed" {
			err = fmt.Errorf("compaction ended %q", r.Status)
		}
		return err
	})
	stage(func() error { compacted.cpuMS, err = run(f, k); return err })
	stage(func() error { return measure(f, &compacted) })
	if f != nil {
		if cerr := f.close(); err == nil {
			err = cerr
		}
	}
	var g *warmClient
	stage(func() error { g, err = b.longFresh(ctx, s, w.threadID, &freshAfter, run, measure, k); return err })
	if g != nil {
		if cerr := g.close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("long thread at turn %d: %w", turns, err)
	}
	b.addNote(name, fmt.Sprintf("the child that ran the %d turns", n), fmt.Sprintf("USS %s MB, PSS %s MB, codex CPU %s ms/turn over its last %d",
		fmtFloat(grown.uss), fmtFloat(grown.pss), fmtFloat(grown.cpuMS), k))
	b.addRow(name, fmt.Sprintf("fresh child on the thread: USS MB after %d turns, then after compaction and %d more", k, k), "before", fresh.uss, "compacted", compacted.uss, "before/after", ratio(fresh.uss, compacted.uss))
	b.addRow(name, "the same child: PSS MB", "before", fresh.pss, "compacted", compacted.pss, "before/after", ratio(fresh.pss, compacted.pss))
	b.addRow(name, fmt.Sprintf("the same child: codex CPU ms/turn over %d turns", k), "before", fresh.cpuMS, "compacted", compacted.cpuMS, "before/after", ratio(fresh.cpuMS, compacted.cpuMS))
	b.addRow(name, "a fresh child: start + thread/resume ms", "before", fresh.resumeMS, "compacted", freshAfter.resumeMS, "before/after", ratio(fresh.resumeMS, freshAfter.resumeMS))
	b.addRow(name, fmt.Sprintf("a fresh child: USS MB after %d turns", k), "before", fresh.uss, "compacted", freshAfter.uss, "before/after", ratio(fresh.uss, freshAfter.uss))
	b.addRow(name, "a fresh child: codex CPU ms/turn", "before", fresh.cpuMS, "compacted", freshAfter.cpuMS, "before/after", ratio(fresh.cpuMS, freshAfter.cpuMS))
	b.addNote(name, "compaction", fmt.Sprintf("one thread/compact/start after %d turns: %s ms wall (one model request)", n+k, fmtFloat(compacted.compactMS)))
	for key, v := range map[string]float64{
		"long_grown_uss_mb": grown.uss, "long_grown_cpu_ms_per_turn": grown.cpuMS,
		"long_uss_mb_before": fresh.uss, "long_uss_mb_after": compacted.uss,
		"long_pss_mb_before": fresh.pss, "long_pss_mb_after": compacted.pss,
		"long_codex_cpu_ms_per_turn_before": fresh.cpuMS, "long_codex_cpu_ms_per_turn_after": compacted.cpuMS,
		"long_resume_ms_before": fresh.resumeMS, "long_resume_ms_after": freshAfter.resumeMS,
		"long_fresh_uss_mb_before": fresh.uss, "long_fresh_uss_mb_after": freshAfter.uss,
		"long_compact_ms": compacted.compactMS, "long_turns": float64(n),
	} {
		b.sum.set(key, v)
	}
	return nil
}

// longFresh starts a fresh child on the thread (timed: spawn, initialize, thread/resume), runs
// k turns on it and measures it into st. It returns the child, open, for the caller to close
// (nil when it did not start).
func (b *bench) longFresh(ctx context.Context, s side, threadID string, st *longStage,
	run func(*warmClient, int) (float64, error), measure func(*warmClient, *longStage) error, k int) (*warmClient, error) {
	start := time.Now()
	f, err := startWarm(ctx, warmConfig{Bin: b.cfg.CodexBin, Side: s}, threadID)
	if err != nil {
		return nil, err
	}
	st.resumeMS = ms(time.Since(start))
	if st.cpuMS, err = run(f, k); err == nil {
		err = measure(f, st)
	}
	return f, err
}

// childCPU is pid's CPU time so far (user and system), its children's excluded.
func childCPU(pid int, tick time.Duration) (time.Duration, error) {
	st, err := readProcStat(pid)
	if err != nil {
		return 0, err
	}
	return time.Duration(st.UTime+st.STime) * tick, nil
}
