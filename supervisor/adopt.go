package supervisor

import (
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/childproc"
	"github.com/molecule-ai/codex-warm/supervisor/hosts"
)

// adoption is one chat's thread in a child the previous image handed over, as the table takes
// it (adoptSession).
type adoption struct {
	chatKey  string
	threadID string
	turns    int
	started  time.Time
	turn     *HandedTurn // its running turn, nil when idle
	child    Child
	host     *hosts.Host // the shared child it lives in, nil when the child is its own
	pid      int
	ident    childproc.Identity
	log      *zap.Logger
}

// adopt registers the children the previous image handed over as idle sessions of their chats.
// One that finds no slot (the new image allows fewer children) is closed.
func (h *handover) adopt(children []AdoptedChild) {
	for _, a := range children {
		if len(a.Shared) > 0 {
			h.adoptShared(a)
			continue
		}
		pid := a.Child.PID()
		sess := h.adoptThread(adoption{chatKey: a.ChatKey, threadID: a.ThreadID, turns: a.Turns, started: a.Started,
			turn: a.Turn, child: a.Child, pid: pid, ident: childproc.ReadIdentity(pid),
			log: h.log.With(zap.String("chat_key", a.ChatKey), zap.Int("pid", pid), zap.String("thread_id", a.ThreadID))})
		if sess == nil {
			h.log.Warn("no slot for a handed-over child; closing it", zap.String("chat_key", a.ChatKey), zap.Int("pid", pid))
			_ = a.Child.Close()
			continue
		}
		sess.log.Info("codex child adopted from the previous image; its chat stays warm", zap.Bool("running_turn", a.Turn != nil))
	}
}

// adoptShared registers a shared child the previous image handed over, with each of its chats'
// threads as an idle session. A pool of one thread per child closes it instead: its chats'
// next messages resume their threads in children of their own.
func (h *handover) adoptShared(a AdoptedChild) {
	threads := append([]SharedThread{{ChatKey: a.ChatKey, ThreadID: a.ThreadID, Started: a.Started, Turns: a.Turns, Turn: a.Turn}}, a.Shared...)
	pid := a.Child.PID()
	if h.hosts == nil {
		h.log.Warn("a shared codex child was handed over to a pool of one child per chat; closing it (its chats resume their threads in children of their own)",
			zap.Int("pid", pid), zap.Int("threads", len(threads)))
		_ = a.Child.Close()
		return
	}
	ids := make([]string, len(threads))
	for i, th := range threads {
		ids[i] = th.ThreadID
	}
	views := h.hosts.Adopt(a.Child, ids)
	ident := childproc.ReadIdentity(pid)
	for i, th := range threads {
		v := views[i]
		sess := h.adoptThread(adoption{chatKey: th.ChatKey, threadID: th.ThreadID, turns: th.Turns, started: th.Started,
			turn: th.Turn, child: v, host: v.Host(), pid: pid, ident: ident,
			log: h.log.With(zap.String("chat_key", th.ChatKey), zap.Int("pid", pid), zap.String("thread_id", th.ThreadID))})
		if sess == nil {
			h.log.Warn("no slot for a handed-over chat's thread; letting it go", zap.String("chat_key", th.ChatKey), zap.Int("pid", pid))
			_ = v.Close()
		}
	}
	h.log.Info("shared codex child adopted from the previous image; its chats stay warm", zap.Int("pid", pid), zap.Int("threads", len(threads)))
}

// adoptThread makes a's thread its chat's idle session (nil when no slot is free) and starts
// its watcher. The approvals of its running turn keep their numbers.
func (h *handover) adoptThread(a adoption) *session {
	keep := func() { h.approvals.Keep(a.chatKey, a.turn.Approvals) }
	var sess *session
	h.st.do(func(t *table) { sess = t.adoptSession(a, keep) })
	if sess != nil {
		h.pool.startWatcher(sess)
	}
	return sess
}

// adoptSession is adoptThread's transition: a slot, a session of a's chat on its thread (with
// the turns it ran and when it started), idle, and its running turn first in the chat's queue,
// once keep kept the numbers of its approvals.
func (t *table) adoptSession(a adoption, keep func()) *session {
	if !t.takeSlot() {
		return nil
	}
	k := t.key(a.chatKey)
	sess := t.newSession(k, a.log)
	k.sess = sess
	sess.child, sess.host, sess.pid, sess.proc = a.child, a.host, a.pid, a.ident
	sess.threadID, sess.recorded, sess.ready = a.threadID, true, true
	sess.turns = a.turns
	if !a.started.IsZero() {
		sess.started = a.started
	}
	t.setState(sess, StateIdle)
	if a.turn != nil {
		keep()
		t.adoptTurn(k, a.turn)
	}
	return sess
}
