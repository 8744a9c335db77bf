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
// copied under the table's lock; those reads and the LastActivity calls happen after it is
// released, so taking a snapshot under load does not stall Submit.
func (s *Supervisor) Status() Snapshot {
	snap := s.pool.snapshot(func(*session) bool { return true })
	t := &snap.Totals
	t.OverloadRetries = s.overloadRetries.Load()
	t.Compactions, t.CompactionFailures = s.chats.compactCounts()
	snap.Model, snap.Limits, snap.Usage = s.model.Status(), s.limits.Status(), s.usage.All()
	return snap
}

// snapshot is the pool's side of Status with rows only for the sessions want accepts: only their
// children's memory is read, when it has to be. The totals other than the memory sums cover the
// whole pool.
func (p *pool) snapshot(want func(*session) bool) Snapshot {
	now := time.Now()
	var rows []statusRow
	var t Totals
	p.st.do(func(tb *table) { rows, t = tb.statusRows(want, now) })

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

// statusRow is a session's row of the status table, copied under the table's lock.
type statusRow struct {
	cs    ChildStatus
	child Child
	// mem is the sampler's latest reading of the child, when measured.
	mem      childproc.Memory
	measured bool
}

// statusRows copies the rows of the sessions want accepts, and the totals (but the memory sums).
func (t *table) statusRows(want func(*session) bool, now time.Time) ([]statusRow, Totals) {
	rows := make([]statusRow, 0, len(t.sessions))
	tot := Totals{
		Queued:          t.queuedTotal(),
		Live:            len(t.sessions),
		Cap:             t.cfg.MaxChildren,
		ThreadsPerChild: t.cfg.ThreadsPerChild,
		Turns:           t.turns,
		Retired:         maps.Clone(t.retired),
		StoreErrors:     t.storeErrors,
		Restarts:        t.restarts,
		CrashBackoffs:   t.crashBackoffs,
		WaitingForSlot:  t.slots.Waiting(),
	}
	if b := t.slots.Budget(); b > 0 {
		tot.MemoryBudgetBytes = b
	}
	u := t.memory()
	tot.MeasuredPSSBytes, tot.ChargedBytes, tot.ChildEstimateBytes = u.Measured, u.Held, u.Estimate
	perPID := make(map[int]int, len(t.sessions))
	for sess := range t.sessions {
		if sess.pid > 0 {
			perPID[sess.pid]++
		}
	}
	tot.Children = len(perPID)
	for sess := range t.sessions {
		if sess.spare {
			tot.Spares++
		}
		if sess.state == StateBusy {
			tot.Busy++
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
			Queued:   t.queued(sess.key.key),
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
		rows = append(rows, statusRow{cs: cs, child: sess.child, mem: sess.mem, measured: sess.measured})
	}
	return rows, tot
}
