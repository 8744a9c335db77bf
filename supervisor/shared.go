package supervisor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/childproc"
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
func (s *Supervisor) hostRecycleReasonLocked(sess *session, now time.Time) string {
	h := sess.host
	if s.hosts.Draining(h) {
		return ReasonHostDrain
	}
	why := ""
	switch {
	case s.cfg.ChildMemoryLimit > 0 && sess.measured && sess.hostMem.USS > s.cfg.ChildMemoryLimit:
		why = ReasonMemory
	case s.cfg.ChildMaxTurns > 0 && int(h.Turns()) >= s.cfg.ChildMaxTurns:
		why = ReasonMaxTurns
	case s.cfg.ChildMaxAge > 0 && !h.Started().IsZero() && now.Sub(h.Started()) >= s.cfg.ChildMaxAge:
		why = ReasonMaxAge
	}
	if why == "" {
		return ""
	}
	sess.log.Info("recycling shared codex child", zap.String("reason", why),
		zap.Int64("uss_bytes", sess.hostMem.USS), zap.Int64("pss_bytes", sess.hostMem.PSS),
		zap.Int64("turns", h.Turns()), zap.Duration("age", now.Sub(h.Started())))
	if s.hosts.Drain(h, why) {
		s.hostDrainsLocked(h)
	}
	return ReasonHostDrain
}

// onHostDrain is hostDrainsLocked for the host pool, which holds no lock of the pool's.
func (s *Supervisor) onHostDrain(h *hosts.Host) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hostDrainsLocked(h)
}

// hostDrainsLocked runs when host h began draining: its idle threads leave now, the busy ones
// as their turns end (recycleReasonLocked), and those still running after Config.HostDrain are
// interrupted. Its goroutine is the pool's (wg).
func (s *Supervisor) hostDrainsLocked(h *hosts.Host) {
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
		case <-h.Child().Done():
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
func (s *Supervisor) retireHostIdleLocked(h *hosts.Host) {
	for sess := range s.sessions {
		if sess.host == h && (sess.state == StateIdle || sess.state == StateSpare) {
			s.retireLocked(sess, ReasonHostDrain, nil)
		}
	}
}

// pauseShared pauses host h for a reload, whose threads are the idle sessions idle and the
// sessions whose turns run, and describes it: the first session's chat is the child's, the
// others are Shared; each running turn travels with its chat (jobs are their jobs). A child
// that died meanwhile yields a zero Handover (the next image does without it).
func (s *Supervisor) pauseShared(ctx context.Context, h *hosts.Host, idle []*session, running []runningTurn) (HandedChild, []*job, error) {
	p, ok := h.Child().(pausable)
	rp, ok2 := h.Child().(runningPausable)
	if !ok || !ok2 && len(running) > 0 {
		return HandedChild{}, nil, fmt.Errorf("shared codex pid %d: %w", h.PID(), appserver.ErrNoHandover)
	}
	ss := append([]*session(nil), idle...)
	for _, r := range running {
		ss = append(ss, r.sess)
	}
	if n := s.hosts.Threads(h); n != len(ss) {
		// A thread of the child is not a chat's that can cross (a spare's, one leaving):
		// awaitQuiet waits those out, so this is a bug rather than a state to hand over.
		return HandedChild{}, nil, fmt.Errorf("shared codex pid %d holds %d threads, %d of them chats' that can cross", h.PID(), n, len(ss))
	}
	var ho appserver.Handover
	var err error
	if len(running) > 0 {
		ho, err = rp.PauseRunning(ctx)
	} else {
		ho, err = p.Pause(ctx)
	}
	if err != nil {
		if h.Child().Err() != nil {
			return HandedChild{}, nil, nil
		}
		return HandedChild{}, nil, fmt.Errorf("shared codex pid %d: %w", h.PID(), err)
	}
	turns := make(map[string]bool)
	if ho.Turn != nil {
		turns[ho.Turn.ThreadID] = true
	}
	for _, th := range ho.Turns {
		turns[th.ThreadID] = true
	}
	run := make(map[*session]runningTurn, len(running))
	for _, r := range running {
		run[r.sess] = r
	}
	var jobs []*job
	turnOf := func(sess *session) *HandedTurn {
		r, ok := run[sess]
		if !ok || !turns[sess.threadID] {
			return nil // idle, or its turn ended meanwhile
		}
		jobs = append(jobs, r.job)
		return &HandedTurn{MessageID: r.job.messageID, AskApprovalsOf: r.job.askApprovalsOf,
			Approvals: s.approvals.seqsOf(sess.key.key), DeadlineLeft: r.live.watch.leftNow()}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	first := ss[0]
	hc := HandedChild{ChatKey: first.key.key, ThreadID: first.threadID, Started: first.started, Turns: first.turns,
		Handover: ho, Turn: turnOf(first)}
	for _, o := range ss[1:] {
		hc.Shared = append(hc.Shared, SharedThread{ChatKey: o.key.key, ThreadID: o.threadID, Started: o.started,
			Turns: o.turns, Turn: turnOf(o)})
	}
	return hc, jobs, nil
}

// adoptShared registers a shared child the previous image handed over, with each of its chats'
// threads as an idle session. A pool of one thread per child closes it instead: its chats'
// next messages resume their threads in children of their own.
func (s *Supervisor) adoptShared(a AdoptedChild) {
	threads := append([]SharedThread{{ChatKey: a.ChatKey, ThreadID: a.ThreadID, Started: a.Started, Turns: a.Turns, Turn: a.Turn}}, a.Shared...)
	pid := a.Child.PID()
	if s.hosts == nil {
		s.log.Warn("a shared codex child was handed over to a pool of one child per chat; closing it (its chats resume their threads in children of their own)",
			zap.Int("pid", pid), zap.Int("threads", len(threads)))
		_ = a.Child.Close()
		return
	}
	ids := make([]string, len(threads))
	for i, th := range threads {
		ids[i] = th.ThreadID
	}
	views := s.hosts.Adopt(a.Child, ids)
	ident := childproc.ReadIdentity(pid)
	for i, th := range threads {
		v := views[i]
		s.mu.Lock()
		if !s.slots.take(s.memUseLocked()) {
			s.mu.Unlock()
			s.log.Warn("no slot for a handed-over chat's thread; letting it go", zap.String("chat_key", th.ChatKey), zap.Int("pid", pid))
			_ = v.Close()
			continue
		}
		k := s.keyLocked(th.ChatKey)
		sess := s.newSessionLocked(k, s.log.With(zap.String("chat_key", th.ChatKey), zap.Int("pid", pid),
			zap.String("thread_id", th.ThreadID)))
		k.sess = sess
		sess.child, sess.host, sess.pid, sess.proc = v, v.Host(), pid, ident
		s.adoptedLocked(k, sess, th.ThreadID, th.Turns, th.Started, th.Turn)
	}
	s.log.Info("shared codex child adopted from the previous image; its chats stay warm", zap.Int("pid", pid), zap.Int("threads", len(threads)))
}
