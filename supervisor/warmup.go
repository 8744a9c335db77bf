package supervisor

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
)

// A spare is warmed before it is handed out (appserver.Client.WarmUp): its own thread is named,
// which writes it to disk, and a throwaway turn against the daemon's canned responder runs on an
// ephemeral thread. A chat's first message then costs about what its later ones do. The
// warm-up never blocks a chat: one that fails leaves the spare ready, only less warm, and is
// logged once (later ones at debug level).
//
// The name is visible where codex lists threads (`codex resume`), so a spare's thread is named
// sparePlaceholderName while it waits and the chat key once a chat takes it; a chat that resumes
// its stored thread instead has the spare's unused thread deleted once its first turn is over, and
// a spare closed before any chat took it has its thread deleted as it closes, so no empty thread
// is left in CODEX_HOME. Both wait until the chat's first turn is over (settleSpare).

// sparePlaceholderName names a warmed spare's thread until a chat takes it.
const sparePlaceholderName = "codex-warm spare"

// spareWarmUpTimeout bounds a warm-up (HandshakeTimeout, when shorter, too). It takes about
// 70 ms; a responder that does not answer would otherwise hold the spare back from chats that
// wait for it.
const spareWarmUpTimeout = 10 * time.Second

// warmer is a Child that can be warmed up (*appserver.Client).
type warmer interface {
	WarmUp(ctx context.Context, threadID, name string, opts appserver.ThreadOptions) error
	SetThreadName(ctx context.Context, threadID, name string) error
	DeleteThread(ctx context.Context, threadID string) error
}

// The appserver client is the production warmer.
var _ warmer = (*appserver.Client)(nil)

// warmSpare warms the spare's child up on its thread id. It reports whether a warm-up was
// tried (it names the thread, which the hand-out then renames or deletes), and an error only
// when the child cannot serve a chat any more: its throwaway turn ignored turn/interrupt.
func (p *pool) warmSpare(sess *session, id string) (bool, error) {
	w, ok := sess.child.(warmer)
	if !ok {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(p.accepting, min(spareWarmUpTimeout, p.cfg.HandshakeTimeout))
	err := w.WarmUp(ctx, id, sparePlaceholderName, p.cfg.Thread)
	cancel()
	switch {
	case errors.Is(err, appserver.ErrNoWarmUp):
		return false, nil
	case errors.Is(err, appserver.ErrWedged):
		return true, err
	case err != nil && p.accepting.Err() != nil:
		// Shutdown cut it short: nothing to tell.
		return true, nil
	case err == nil:
		sess.log.Debug("spare codex child warmed up", zap.String("thread_id", id))
	case p.warmUpFailed.CompareAndSwap(false, true):
		sess.log.Warn("spare codex child could not warm up; spares are handed out anyway, their first turn slower "+
			"(further failures are logged at debug level)", zap.String("thread_id", id), zap.Error(err))
	default:
		sess.log.Debug("spare codex child could not warm up", zap.String("thread_id", id), zap.Error(err))
	}
	return true, nil
}

// claimSpareThread runs at the hand-out of a warmed spare to key: its thread is to be named after
// the chat that uses it (use), else deleted, by settleSpare, off the first reply's path.
func (p *pool) claimSpareThread(sess *session, key string, use bool) {
	p.st.do(func(t *table) { t.claimSpareThread(sess, key, use) })
}

// settleSpare, called by the watcher at every idle and before closing (closing) a child, finishes
// a hand-out once: names the thread, rewrites the children record, lets the keeper replace the
// spare; and deletes a warmed spare's thread no chat uses (a spare's own as it closes).
func (p *pool) settleSpare(sess *session, closing bool) {
	var handedOut, due bool
	var name string
	p.st.do(func(t *table) { handedOut, name, due = t.settleSpare(sess, closing) })
	if handedOut {
		p.persistRecords() // the record now names the chat
		p.kickSpares()
	}
	w, ok := sess.child.(warmer)
	if !ok || name == "" && !due || sess.child.Err() != nil {
		return
	}
	// Not p.accepting: at shutdown it is cancelled, and this is part of closing the child.
	ctx, cancel := context.WithTimeout(context.Background(), spareDeleteTimeout)
	defer cancel()
	if name != "" {
		if err := w.SetThreadName(ctx, sess.spareThread, name); err != nil {
			sess.log.Warn("could not name the thread after its chat; it keeps the spare's name",
				zap.String("thread_id", sess.spareThread), zap.Error(err))
		}
	}
	if due {
		if err := w.DeleteThread(ctx, sess.spareThread); err != nil {
			sess.log.Warn("could not delete the spare's unused thread; an empty thread stays in CODEX_HOME",
				zap.String("thread_id", sess.spareThread), zap.Error(err))
		}
	}
}

// spareDeleteTimeout bounds the naming, or the deletion, of a spare's thread (about 10 ms).
const spareDeleteTimeout = 2 * time.Second

// claimSpareThread marks sess, a warmed spare a chat took, to have its thread named after key
// (use) or, when the chat resumed a thread of its own, deleted.
func (t *table) claimSpareThread(sess *session, key string, use bool) {
	switch {
	case !sess.spareWarmed || sess.spareThread == "":
	case use:
		sess.spareName = key
	default:
		sess.spareUnused = true
	}
}

// settleSpare is pool.settleSpare's transition: whether a hand-out is still to be finished
// (handedOut), the name the thread is to take now, and whether the warmed spare thread is to be
// deleted now (due), which it marks done: it is deleted at most once.
func (t *table) settleSpare(sess *session, closing bool) (handedOut bool, name string, due bool) {
	handedOut = !sess.replaceAfter.IsZero()
	sess.replaceAfter = time.Time{}
	if sess.state == StateIdle || closing {
		name, sess.spareName = sess.spareName, ""
	}
	due = sess.spareWarmed && sess.spareThread != "" && (sess.spareUnused || closing && sess.spare)
	if due {
		sess.spareWarmed = false // done, or tried
	}
	return handedOut, name, due
}
