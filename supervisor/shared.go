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

// ownChildLocked reports whether k's next thread goes to a child of its own: a crash counted
// against the chat (its turn or thread setup ran when a child died), until a turn of it
// completes. The chat whose turns kill children cannot take neighbours down with it, and a
// neighbour that only happened to be mid-turn is back in a shared child after its next reply.
func ownChildLocked(k *keyState) bool {
	return k.crash.pending()
}

// hostRecycleReasonLocked is recycleReasonLocked for a thread in a shared child: the child's
// whole memory, age and turns decide, and the child drains; "" when it stays.
func (p *pool) hostRecycleReasonLocked(sess *session, now time.Time) string {
	h := sess.host
	if p.hosts.Draining(h) {
		return ReasonHostDrain
	}
	why := ""
	switch {
	case p.cfg.ChildMemoryLimit > 0 && sess.measured && sess.hostMem.USS > p.cfg.ChildMemoryLimit:
		why = ReasonMemory
	case p.cfg.ChildMaxTurns > 0 && int(h.Turns()) >= p.cfg.ChildMaxTurns:
		why = ReasonMaxTurns
	case p.cfg.ChildMaxAge > 0 && !h.Started().IsZero() && now.Sub(h.Started()) >= p.cfg.ChildMaxAge:
		why = ReasonMaxAge
	}
	if why == "" {
		return ""
	}
	sess.log.Info("recycling shared codex child", zap.String("reason", why),
		zap.Int64("uss_bytes", sess.hostMem.USS), zap.Int64("pss_bytes", sess.hostMem.PSS),
		zap.Int64("turns", h.Turns()), zap.Duration("age", now.Sub(h.Started())))
	if p.hosts.Drain(h, why) {
		p.hostDrainsLocked(h)
	}
	return ReasonHostDrain
}

// onHostDrain is hostDrainsLocked for the host pool, which holds no lock of the pool's.
func (p *pool) onHostDrain(h *hosts.Host) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hostDrainsLocked(h)
}

// hostDrainsLocked runs when host h began draining: its idle threads leave now, the busy ones
// as their turns end (recycleReasonLocked), and those still running after Config.HostDrain are
// interrupted. Its goroutine is the pool's (wg).
func (p *pool) hostDrainsLocked(h *hosts.Host) {
	if p.closed {
		return // Shutdown closes every child
	}
	p.retireHostIdleLocked(h)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTimer(p.cfg.HostDrain)
		defer t.Stop()
		select {
		case <-t.C:
		case <-h.Child().Done():
			return
		case <-p.accepting.Done():
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		for sess := range p.sessions {
			if sess.host == h && sess.state == StateBusy && sess.key.stopRun != nil && sess.key.sess == sess {
				sess.log.Info("interrupting a turn of a shared codex child that drains", zap.Duration("waited", p.cfg.HostDrain))
				sess.key.stopRun(errHostDrained)
			}
		}
	}()
}

// retireHostIdleLocked retires the idle sessions (and spares) of host h.
func (p *pool) retireHostIdleLocked(h *hosts.Host) {
	for sess := range p.sessions {
		if sess.host == h && (sess.state == StateIdle || sess.state == StateSpare) {
			p.retireLocked(sess, ReasonHostDrain, nil)
		}
	}
}
