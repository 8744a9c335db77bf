package supervisor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/childproc"
)

// A reload re-executes the daemon in place. Freeze waits until every chat is between turns,
// then pauses every idle child at a message boundary and returns them; the caller hands them
// to the next image, which gives them back through Config.Adopted. Thaw calls a reload off.

// ErrReloading is the error of a message that reached the supervisor while it was frozen for a
// reload: its inbox had stopped taking messages, so only a straggler meets it.
var ErrReloading = errors.New("the daemon is reloading")

// ReasonReload: a spare retired so that the daemon could reload (spares are not handed over).
const ReasonReload = "reload"

// HandedChild is one idle child of a chat, paused for the next image of the daemon.
type HandedChild struct {
	ChatKey  string
	ThreadID string
	Started  time.Time
	Turns    int
	Handover appserver.Handover
}

// AdoptedChild is a child the previous image of the daemon handed over (see Freeze), ready to
// run its chat's next turn on ThreadID.
type AdoptedChild struct {
	ChatKey  string
	ThreadID string
	Started  time.Time
	Turns    int
	Child    Child
}

// pausable is a Child that can be handed over: the appserver client.
type pausable interface {
	Pause(ctx context.Context) (appserver.Handover, error)
	Resume()
}

// Freeze waits, until ctx is done, for every running turn and queued message to finish and
// every starting child to be ready; spares are retired. Then it refuses new messages
// (ErrReloading) and pauses every idle child, and returns them. The caller must stop its
// inboxes first, or Freeze may wait for ever-new work until ctx ends. On error the supervisor
// runs on as before; after success, Thaw undoes it.
func (s *Supervisor) Freeze(ctx context.Context) ([]HandedChild, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	if s.freezing {
		s.mu.Unlock()
		return nil, errors.New("supervisor: already frozen")
	}
	s.freezing = true
	s.mu.Unlock()
	idle, err := s.awaitQuiet(ctx)
	if err != nil {
		s.mu.Lock()
		s.freezing = false
		s.mu.Unlock()
		s.kickSpares()
		return nil, err
	}
	var out []HandedChild
	var paused []pausable
	for _, sess := range idle {
		p, ok := sess.child.(pausable)
		if !ok {
			err = fmt.Errorf("chat %s: codex pid %d: %w", sess.key.key, sess.pid, appserver.ErrNoHandover)
			break
		}
		h, perr := p.Pause(ctx)
		if perr != nil {
			if sess.child.Err() != nil {
				// It died meanwhile: the next image does without it.
				continue
			}
			err = fmt.Errorf("chat %s: %w", sess.key.key, perr)
			break
		}
		paused = append(paused, p)
		out = append(out, HandedChild{ChatKey: sess.key.key, ThreadID: sess.threadID, Started: sess.started,
			Turns: sess.turns, Handover: h})
	}
	if err != nil {
		for _, p := range paused {
			p.Resume()
		}
		s.mu.Lock()
		s.freezing, s.frozen = false, false
		s.mu.Unlock()
		s.kickSpares()
		return nil, err
	}
	s.mu.Lock()
	s.paused = paused
	s.mu.Unlock()
	s.log.Info("frozen for a reload", zap.Int("children", len(out)))
	return out, nil
}

// Thaw calls off a reload after Freeze: the children go on and messages are taken again.
func (s *Supervisor) Thaw() {
	s.mu.Lock()
	paused := s.paused
	s.paused = nil
	s.freezing, s.frozen = false, false
	s.mu.Unlock()
	for _, p := range paused {
		p.Resume()
	}
	s.kickSpares()
	s.log.Info("reload called off; serving on")
}

// awaitQuiet retires the spares and waits until every child is idle and ready, or retired and
// reaped, and no chat has work; then it marks the supervisor frozen and returns the idle
// children.
func (s *Supervisor) awaitQuiet(ctx context.Context) ([]*session, error) {
	for {
		s.mu.Lock()
		var busy []string
		var idle []*session
		for sess := range s.sessions {
			switch {
			case sess.spare && sess.state == StateSpare:
				s.retireLocked(sess, ReasonReload, nil)
				busy = append(busy, "a spare retiring")
			case sess.spare:
				busy = append(busy, "a spare "+string(sess.state))
			case sess.state == StateIdle && !s.queue.BusyLocked(sess.key.key):
				idle = append(idle, sess)
			default:
				busy = append(busy, fmt.Sprintf("chat %s %s", sess.key.key, sess.state))
			}
		}
		for key := range s.keys {
			if s.queue.BusyLocked(key) && (s.keys[key].sess == nil || s.keys[key].sess.state == StateIdle) {
				busy = append(busy, "chat "+key+" has work")
			}
		}
		if len(busy) == 0 {
			s.frozen = true
			s.mu.Unlock()
			return idle, nil
		}
		changed := s.changedLocked()
		s.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("supervisor: still busy (%s): %w", joinFirst(busy, 4), context.Cause(ctx))
		}
	}
}

// changedLocked returns a channel closed at the next change of a child's state or of a chat's
// work (notifyChangedLocked).
func (s *Supervisor) changedLocked() <-chan struct{} {
	if s.changed == nil {
		s.changed = make(chan struct{})
	}
	return s.changed
}

// notifyChangedLocked wakes awaitQuiet.
func (s *Supervisor) notifyChangedLocked() {
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
}

func joinFirst(items []string, n int) string {
	out := ""
	for i, it := range items {
		if i == n {
			return fmt.Sprintf("%s and %d more", out, len(items)-n)
		}
		if i > 0 {
			out += ", "
		}
		out += it
	}
	return out
}

// adopt registers the children the previous image handed over as idle sessions of their chats.
// One that finds no slot (the new image allows fewer children) is closed.
func (s *Supervisor) adopt(children []AdoptedChild) {
	for _, a := range children {
		s.mu.Lock()
		if !s.slots.take(s.memUseLocked()) {
			s.mu.Unlock()
			s.log.Warn("no slot for a handed-over child; closing it", zap.String("chat_key", a.ChatKey), zap.Int("pid", a.Child.PID()))
			_ = a.Child.Close()
			continue
		}
		k := s.keyLocked(a.ChatKey)
		sess := s.newSessionLocked(k, s.log.With(zap.String("chat_key", a.ChatKey), zap.Int("pid", a.Child.PID()),
			zap.String("thread_id", a.ThreadID)))
		k.sess = sess
		sess.child, sess.pid, sess.proc = a.Child, a.Child.PID(), childproc.ReadIdentity(a.Child.PID())
		sess.threadID, sess.recorded, sess.ready = a.ThreadID, true, true
		sess.turns = a.Turns
		if !a.Started.IsZero() {
			sess.started = a.Started
		}
		s.setStateLocked(sess, StateIdle)
		s.mu.Unlock()
		s.wg.Add(1)
		go s.watch(sess)
		sess.log.Info("codex child adopted from the previous image; its chat stays warm")
	}
}
