package molecule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/atomicfile"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// The canvas's "New session" button starts one new codex thread for the canvas chat, as /new
// does. What the platform records of it (enteros-core, workspace-server/internal/handlers/
// chat_session.go) is a marker, the workspace's chat_session_started_at, moved to now; /chat-
// history then lists only canvas rows created at or after it. The canvas, on every device,
// then mints a contextId of its own (sess-<ws>-<uuid>) for its sends, while sends without one
// and the platform's own turns carry canvas-<ws> (canvas chatContext.ts, handlers/a2a_proxy.go).
//
// So a new sess- id alone does not mean a reset: two devices mint two after one press. The
// marker is not readable as such by a workspace, but /chat-history (behind the workspace token,
// like /activity) shows whether it moved past a row: the chat remembers a canvas row answered on
// its current thread (the reference: the last one with a sess- id, or the first canvas row seen
// when none had one), and a message with a sess- id other than the reference's starts a new
// thread exactly when the reference row is no longer in /chat-history (asked with before_ts just
// after it). A message whose id differs but whose reference row is still listed joins the
// current thread (another device of the same session). canvas-<ws> and rows without a contextId
// never start a thread and never move a reference once there is one. The reference is kept in
// <StateDir>/canvas-session.json, so a message seen again after a restart does not start a
// second thread, and a New session pressed while the daemon was down is still seen.
//
// If /chat-history cannot be read (an older platform, an outage) the message joins the current
// thread and a warning says so: the user can still send /new.

// sessionFileName holds the canvas chat's reference row.
const sessionFileName = "canvas-session.json"

// contextSessionPrefix starts the contextIds a New session makes the canvas mint; the default
// one is canvas-<ws>.
const contextSessionPrefix = "sess-"

// Resetter starts a chat over on a new codex thread; *supervisor.Supervisor is one.
type Resetter interface {
	Reset(ctx context.Context, chatKey string) (supervisor.ResetResult, error)
}

// sessionRef is the last canvas row with a sess- contextId answered on the current thread.
type sessionRef struct {
	ActivityID string    `json:"activity_id"`
	CreatedAt  time.Time `json:"created_at"`
	ContextID  string    `json:"context_id"`
}

// canvasSession is the canvas chat's reference row and where it is kept. Only the canvas chat's
// worker uses it; the lock keeps that an implementation detail.
type canvasSession struct {
	path string
	mu   sync.Mutex
	ref  sessionRef
}

func openCanvasSession(dir string) (*canvasSession, error) {
	s := &canvasSession{path: filepath.Join(dir, sessionFileName)}
	b, err := atomicfile.ReadFile(s.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("read %s: %w", s.path, err)
	}
	if err := json.Unmarshal(b, &s.ref); err != nil {
		// Losing it costs at most one New session pressed while the daemon was down.
		s.ref = sessionRef{}
	}
	return s, nil
}

func (s *canvasSession) set(ref sessionRef) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ref == ref {
		return nil
	}
	s.ref = ref
	b, err := json.Marshal(ref)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(s.path, append(b, '\n'), atomicfile.Options{})
}

func (s *canvasSession) current() sessionRef {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ref
}

// followCanvasSession decides whether msg starts a new thread (see the top of this file) and, when
// it does, resets the chat before msg reaches codex. It runs on the chat's worker, before the
// message's turn; the supervisor finishes the chat's earlier messages on the old thread first.
func (w *workspace) followCanvasSession(ctx context.Context, log *zap.Logger, msg message) {
	if w.session == nil {
		return
	}
	at, err := time.Parse(time.RFC3339Nano, msg.CreatedAt)
	if err != nil {
		log.Warn("canvas message without a readable created_at; it continues the current thread",
			zap.String("context_id", msg.ContextID), zap.String("created_at", msg.CreatedAt))
		return
	}
	this := sessionRef{ActivityID: msg.ActivityID, CreatedAt: at, ContextID: msg.ContextID}
	ref := w.session.current()
	if !strings.HasPrefix(msg.ContextID, contextSessionPrefix) {
		// The default id never starts a thread. It seeds the reference of a chat that has none,
		// and moves it no further: a platform turn after a New session must not hide the press
		// from the first sess- message after it.
		if ref.ActivityID == "" {
			w.recordSession(log, this)
		}
		return
	}
	reset := false
	switch {
	case ref.ActivityID == "", ref.ContextID == msg.ContextID, ref.ActivityID == msg.ActivityID:
	default:
		listed, err := w.client.ChatHistoryHas(ctx, ref.CreatedAt)
		switch {
		case err != nil:
			log.Warn("cannot tell whether the canvas started a new session (chat-history unreadable); the message continues the current thread (/new starts over)",
				zap.String("context_id", msg.ContextID), zap.Error(err))
		case listed:
			log.Info("canvas message from another device or id of the same session; it joins the current thread",
				zap.String("context_id", msg.ContextID))
		default:
			reset = true
		}
	}
	if reset {
		if w.cfg.Resetter == nil {
			log.Warn("the canvas started a new session but the inbox has no Resetter; the message continues the current thread")
		} else if res, err := w.cfg.Resetter.Reset(ctx, msg.ChatKey); err != nil {
			log.Error("the canvas started a new session but the chat could not start over; the message continues the old thread", zap.Error(err))
		} else {
			log.Info("the canvas started a new session: this message opens a new thread",
				zap.String("context_id", msg.ContextID), zap.String("old_thread_id", res.OldThreadID), zap.Bool("after_running_turn", res.Deferred))
		}
	}
	w.recordSession(log, this)
}

func (w *workspace) recordSession(log *zap.Logger, ref sessionRef) {
	if err := w.session.set(ref); err != nil {
		log.Warn("could not record the canvas session's reference row; a restart may miss a New session", zap.Error(err))
	}
}
