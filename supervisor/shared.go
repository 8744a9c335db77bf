package supervisor

import (
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/supervisor/hosts"
)

// The pool's side of shared children (hosts.go): who gets a child of its own, what recycles a
// shared child, and its drain.

// errHostDrained is the cause of a turn interrupted because its shared child drains past
// Config.HostDrain.
var errHostDrained = errors.New("the shared codex child is being replaced")

// ownChild reports whether k's next thread goes to a child of its own: a crash counted
// against the chat (its turn or thread setup ran when a child died), until a turn of it
// completes. The chat whose turns kill children cannot take neighbours down with it, and a
// neighbour that only happened to be mid-turn is back in a shared child after its next reply.
func ownChild(k *keyState) bool {
	return k.crash.pending()
}

// hostRecycleReason is recycleReason for a thread in a shared child: the child's
// whole memory, age and turns decide, and the child drains; "" when it stays.
func (t *table) hostRecycleReason(sess *session, now time.Time) string {
	h := sess.host
	if t.hosts.Draining(h) {
		return ReasonHostDrain
	}
	why := ""
	switch {
	case t.cfg.ChildMemoryLimit > 0 && sess.measured && sess.hostMem.USS > t.cfg.ChildMemoryLimit:
		why = ReasonMemory
	case t.cfg.ChildMaxTurns > 0 && int(h.Turns()) >= t.cfg.ChildMaxTurns:
		why = ReasonMaxTurns
	case t.cfg.ChildMaxAge > 0 && !h.Started().IsZero() && now.Sub(h.Started()) >= t.cfg.ChildMaxAge:
		why = ReasonMaxAge
	}
	if why == "" {
		return ""
	}
	sess.log.Info("recycling shared codex child", zap.String("reason", why),
		zap.Int64("uss_bytes", sess.hostMem.USS), zap.Int64("pss_bytes", sess.hostMem.PSS),
		zap.Int64("turns", h.Turns()), zap.Duration("age", now.Sub(h.Started())))
	if t.hosts.Drain(h, why) {
		t.hostDrains(h)
	}
	return ReasonHostDrain
}

// onHostDrain is hostDrains for the host pool, which holds no lock of the pool's.
func (p *pool) onHostDrain(h *hosts.Host) {
	p.st.do(func(t *table) { t.hostDrains(h) })
}

// hostDrains runs when host h began draining: its idle threads leave now, the busy ones
// as their turns end (recycleReason), and those still running after Config.HostDrain are
// interrupted. Its goroutine is the pool's (wg).
func (t *table) hostDrains(h *hosts.Host) {
	if t.closed {
		return // Shutdown closes every child
	}
	t.retireHostIdle(h)
	t.drainTimer(h)
}

// drainTimer waits Config.HostDrain for the turns of host h, which began draining, and then
// interrupts those still running. Its goroutine is the pool's (wg).
func (p *pool) drainTimer(h *hosts.Host) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		timer := time.NewTimer(p.cfg.HostDrain)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-h.Child().Done():
			return
		case <-p.accepting.Done():
			return
		}
		p.st.do(func(t *table) { t.interruptHost(h) })
	}()
}

// interruptHost interrupts the running turns of host h, which drained for Config.HostDrain.
func (t *table) interruptHost(h *hosts.Host) {
	for sess := range t.sessions {
		if sess.host == h && sess.state == StateBusy && sess.key.stopRun != nil && sess.key.sess == sess {
			sess.log.Info("interrupting a turn of a shared codex child that drains", zap.Duration("waited", t.cfg.HostDrain))
			sess.key.stopRun(errHostDrained)
		}
	}
}

// retireHostIdle retires the idle sessions (and spares) of host h.
func (t *table) retireHostIdle(h *hosts.Host) {
	for sess := range t.sessions {
		if sess.host == h && (sess.state == StateIdle || sess.state == StateSpare) {
			t.retire(sess, ReasonHostDrain, nil)
		}
	}
}
