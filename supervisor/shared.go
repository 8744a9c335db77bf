package supervisor

import (
	"errors"
	"time"

	"go.uber.org/zap"
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
	return k.crash.failures > 0
}

// hostRecycleReasonLocked is recycleReasonLocked for a thread in a shared child: the child's
// whole memory, age and turns decide, and the child drains; "" when it stays.
func (s *Supervisor) hostRecycleReasonLocked(sess *session, now time.Time) string {
	h := sess.host
	if s.hosts.draining(h) {
		return ReasonHostDrain
	}
	why := ""
	switch {
	case s.cfg.ChildMemoryLimit > 0 && sess.measured && sess.hostMem.USS > s.cfg.ChildMemoryLimit:
		why = ReasonMemory
	case s.cfg.ChildMaxTurns > 0 && int(h.turns.Load()) >= s.cfg.ChildMaxTurns:
		why = ReasonMaxTurns
	case s.cfg.ChildMaxAge > 0 && !h.started.IsZero() && now.Sub(h.started) >= s.cfg.ChildMaxAge:
		why = ReasonMaxAge
	}
	if why == "" {
		return ""
	}
	sess.log.Info("recycling shared codex child", zap.String("reason", why),
		zap.Int64("uss_bytes", sess.hostMem.USS), zap.Int64("pss_bytes", sess.hostMem.PSS),
		zap.Int64("turns", h.turns.Load()), zap.Duration("age", now.Sub(h.started)))
	if s.hosts.drain(h, why) {
		s.hostDrainsLocked(h)
	}
	return ReasonHostDrain
}

// onHostDrain is hostDrainsLocked for the host pool, which holds no lock of the pool's.
func (s *Supervisor) onHostDrain(h *host) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hostDrainsLocked(h)
}

// hostDrainsLocked runs when host h began draining: its idle threads leave now, the busy ones
// as their turns end (recycleReasonLocked), and those still running after Config.HostDrain are
// interrupted. Its goroutine is the pool's (wg).
func (s *Supervisor) hostDrainsLocked(h *host) {
	if s.closed {
		return // Shutdown closes every child
	}
	s.retireHostIdleLocked(h)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTimer(s.cfg.HostDrain)
		defer t.Stop()
		select {
		case <-t.C:
		case <-h.child.Done():
			return
		case <-s.accepting.Done():
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for sess := range s.sessions {
			if sess.host == h && sess.state == StateBusy && sess.key.stopRun != nil && sess.key.sess == sess {
				sess.log.Info("interrupting a turn of a shared codex child that drains", zap.Duration("waited", s.cfg.HostDrain))
				sess.key.stopRun(errHostDrained)
			}
		}
	}()
}

// retireHostIdleLocked retires the idle sessions (and spares) of host h.
func (s *Supervisor) retireHostIdleLocked(h *host) {
	for sess := range s.sessions {
		if sess.host == h && (sess.state == StateIdle || sess.state == StateSpare) {
			s.retireLocked(sess, ReasonHostDrain, nil)
		}
	}
}
