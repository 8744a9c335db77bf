package supervisor

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/molecule-ai/codex-warm/internal/childproc"
)

// Status returns the live process table. A child's memory is the memory sampler's latest reading
// (every MemorySampleInterval), so a scrape of the status or the metrics reads no /proc file of
// a sampled child; a child the sampler has not read yet (started since the last sample, or
// sampling off) is read once here, so that no row shows a live child holding no memory. Rows are
// copied under the pool lock; those reads and the LastActivity calls happen after it is
// released, so taking a snapshot under load does not stall Submit.
func (s *Supervisor) Status() Snapshot {
	snap := s.pool.snapshot(func(*session) bool { return true }, func(t *Totals) {
		t.Queued = s.chats.queuedTotalLocked()
	})
	t := &snap.Totals
	t.OverloadRetries = s.overloadRetries.Load()
	t.Compactions, t.CompactionFailures = s.chats.compactCounts()
	snap.Model, snap.Limits, snap.Usage = s.model.Status(), s.limits.Status(), s.usage.All()
	return snap
}

// snapshot is the pool's side of Status with rows only for the sessions want accepts: only their
// children's memory is read, when it has to be. The totals other than the memory sums cover the
// whole pool; locked, when set, adds what the chats know to them, with Supervisor.mu held.
func (p *pool) snapshot(want func(*session) bool, locked func(*Totals)) Snapshot {
	type row struct {
		cs    ChildStatus
		child Child
		// mem is the sampler's latest reading of the child, when measured.
		mem      childproc.Memory
		measured bool
	}
	now := time.Now()
	p.mu.Lock()
	rows := make([]row, 0, len(p.sessions))
	t := Totals{
		Live:            len(p.sessions),
		Cap:             p.cfg.MaxChildren,
		ThreadsPerChild: p.cfg.ThreadsPerChild,
		Turns:           p.turns,
		Retired:         maps.Clone(p.retired),
		StoreErrors:     p.storeErrors,
		Restarts:        p.restarts,
		CrashBackoffs:   p.crashBackoffs,
		WaitingForSlot:  p.slots.waiting(),
	}
	if b := p.slots.budgetBytes(); b > 0 {
		t.MemoryBudgetBytes = b
	}
	u := p.memUseLocked()
	t.MeasuredPSSBytes, t.ChargedBytes, t.ChildEstimateBytes = u.measured, u.held, u.estimate
	perPID := make(map[int]int, len(p.sessions))
	for sess := range p.sessions {
		if sess.pid > 0 {
			perPID[sess.pid]++
		}
	}
	t.Children = len(perPID)
	for sess := range p.sessions {
		if sess.spare {
			t.Spares++
		}
		if sess.state == StateBusy {
			t.Busy++
		}
		if !want(sess) {
			continue
		}
		cs := ChildStatus{
			ChatKey:  sess.key.key,
			ThreadID: sess.threadID,
			PID:      sess.pid,
			State:    sess.state,
			Turns:    sess.turns,
			Restarts: sess.restarts,
			Queued:   p.queued(sess.key.key),
			Uptime:   now.Sub(sess.started),
		}
		if sess.host != nil {
			cs.Threads = perPID[sess.pid]
		}
		if sess.state == StateBusy {
			cs.TurnAge = now.Sub(sess.turnStart)
			if lt := sess.key.live; lt != nil && lt.act != nil {
				cs.Activity, cs.ActivitySince = lt.act.Get()
			}
		}
		rows = append(rows, row{cs: cs, child: sess.child, mem: sess.mem, measured: sess.measured})
	}
	if locked != nil {
		locked(&t)
	}
	p.mu.Unlock()

	var procfs childproc.ProcFS
	out := make([]ChildStatus, len(rows))
	for i, r := range rows {
		if r.child != nil {
			r.cs.LastActivity = r.child.LastActivity()
		}
		m, ok := r.mem, r.measured
		if !ok {
			// Not sampled yet: one smaps_rollup read (Config.Memory) gives all three figures; a
			// process that just went away reads as zero.
			fresh, err := p.cfg.Memory(r.cs.PID)
			m, ok = fresh, err == nil
			if n := int64(r.cs.Threads); n > 1 {
				// A shared child: the row's share, as the sampler charges it.
				m = childproc.Memory{RSS: m.RSS / n, PSS: m.PSS / n, USS: m.USS / n}
			}
		}
		if ok {
			r.cs.RSSBytes, r.cs.PSSBytes, r.cs.USSBytes = m.RSS, m.PSS, m.USS
		} else {
			r.cs.RSSBytes = procfs.RSS(r.cs.PID)
		}
		t.RSSBytes += r.cs.RSSBytes
		t.PSSBytes += r.cs.PSSBytes
		t.USSBytes += r.cs.USSBytes
		out[i] = r.cs
	}
	slices.SortFunc(out, func(a, b ChildStatus) int {
		if c := strings.Compare(a.ChatKey, b.ChatKey); c != 0 {
			return c
		}
		return a.PID - b.PID
	})
	return Snapshot{Taken: now, Children: out, Totals: t}
}
