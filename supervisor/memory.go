package supervisor

import (
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/childproc"
	"github.com/molecule-ai/codex-warm/supervisor/slots"
)

// memory computes the pool's memory use from the sessions' latest readings.
//
// The estimate is the mean PSS of the measured children that ran a turn. A child fresh from
// initialize, or in its first turn, is smaller than a warm one (PROTOCOL.md: 11.5 MB private
// idle, 25 MB warm) and would pull the mean down. The mean errs high on purpose: every child's
// PSS carries its share of the codex binary's pages, and one more child makes everyone's share
// smaller, so a new child costs less than the mean in total.
func (t *table) memory() slots.Use {
	u := slots.Use{Estimate: DefaultChildEstimate}
	var warmSum, warmN int64
	measured, retiringUnmeasured := 0, 0
	for sess := range t.sessions {
		if !sess.measured {
			if sess.state == StateRetiring {
				retiringUnmeasured++
			}
			continue
		}
		measured++
		u.Measured += sess.mem.PSS
		if sess.state == StateRetiring {
			u.Freeing += sess.mem.PSS
		}
		if sess.turns > 0 {
			warmSum += sess.mem.PSS
			warmN++
		}
	}
	if warmN > 0 {
		u.Estimate = warmSum / warmN
	}
	u.Held = u.Measured + int64(t.slots.Held()-measured)*u.Estimate
	u.Freeing += int64(retiringUnmeasured) * u.Estimate
	return u
}

// recycleReason says why sess, idle or ending a turn, is to be replaced by a fresh child
// that resumes its thread; "" when it is not.
func (t *table) recycleReason(sess *session, now time.Time) string {
	if sess.host != nil {
		return t.hostRecycleReason(sess, now)
	}
	switch {
	case t.cfg.ChildMemoryLimit > 0 && sess.measured && sess.mem.USS > t.cfg.ChildMemoryLimit:
		return ReasonMemory
	case t.cfg.ChildMaxTurns > 0 && sess.turns >= t.cfg.ChildMaxTurns:
		return ReasonMaxTurns
	case t.cfg.ChildMaxAge > 0 && now.Sub(sess.started) >= t.cfg.ChildMaxAge:
		return ReasonMaxAge
	}
	return ""
}

// recycle retires sess for reason (a recycle reason), logging what crossed its limit.
func (t *table) recycle(sess *session, reason string) {
	sess.log.Info("recycling codex child", zap.String("reason", reason),
		zap.Int64("uss_bytes", sess.mem.USS), zap.Int64("pss_bytes", sess.mem.PSS),
		zap.Int("turns", sess.turns), zap.Duration("age", time.Since(sess.started)))
	t.retire(sess, reason, nil)
}

// sampleMemory is the memory sampler: every MemorySampleInterval it reads each child's memory
// until Shutdown begins. Shutdown waits for it (Supervisor.wg).
func (p *pool) sampleMemory() {
	defer p.wg.Done()
	t := time.NewTicker(p.cfg.MemorySampleInterval)
	defer t.Stop()
	for {
		select {
		case <-p.accepting.Done():
			return
		case <-t.C:
		}
		p.sampleOnce()
	}
}

// sampleOnce reads every live child's memory (outside the lock: /proc reads), stores the
// readings, recycles idle children past their limits and hands the room the readings show to
// slot waiters.
func (p *pool) sampleOnce() {
	type reading struct {
		sess *session
		pid  int
		mem  childproc.Memory // the session's share of its child's
		// whole is the child's own reading (the same as mem unless the child is shared).
		whole childproc.Memory
		err   error
	}
	var rs []reading
	p.st.do(func(t *table) {
		t.each(func(sess *session) {
			if sess.pid > 0 && sess.state != StateRetiring {
				rs = append(rs, reading{sess: sess, pid: sess.pid})
			}
		})
	})
	// A shared child is read once, and each of its threads is charged its share.
	type child struct {
		mem childproc.Memory
		err error
		n   int64
	}
	byPID := make(map[int]*child, len(rs))
	for i := range rs {
		c := byPID[rs[i].pid]
		if c == nil {
			c = &child{}
			c.mem, c.err = p.cfg.Memory(rs[i].pid)
			byPID[rs[i].pid] = c
		}
		c.n++
	}
	for i := range rs {
		c := byPID[rs[i].pid]
		rs[i].whole, rs[i].err = c.mem, c.err
		rs[i].mem = childproc.Memory{RSS: c.mem.RSS / c.n, PSS: c.mem.PSS / c.n, USS: c.mem.USS / c.n}
	}

	now := time.Now()
	p.st.do(func(t *table) {
		if t.closed {
			return
		}
		for _, r := range rs {
			t.measured(r.sess, r.mem, r.whole, r.err, now)
		}
		// Children may have shrunk, or been recycled: room for waiters.
		t.serveWaiters()
	})
}

// measured records the memory sampler's reading of sess (mem its share, whole its child's), or
// its failure, and recycles sess when idle and over a limit.
func (t *table) measured(sess *session, mem, whole childproc.Memory, err error, now time.Time) {
	if _, live := t.sessions[sess]; !live || sess.state == StateRetiring {
		return
	}
	switch {
	case err == nil:
		sess.mem, sess.hostMem, sess.measured = mem, whole, true
	case !sess.memErrLogged:
		// A child that just exited is the watcher's business. Any other failure (no
		// smaps_rollup, no permission) repeats at every sample: say it once per child.
		sess.memErrLogged = true
		sess.log.Warn("cannot read the child's memory; the budget charges it the estimate", zap.Error(err))
	}
	if sess.state == StateIdle {
		if why := t.recycleReason(sess, now); why != "" {
			t.recycle(sess, why)
		}
	}
}
