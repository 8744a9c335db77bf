package supervisor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/projector"
	"github.com/molecule-ai/codex-warm/protocol"
)

// turn runs one turn on a busy session under the turn watchdogs and settles the session.
func (s *Supervisor) turn(k *keyState, sess *session, j *job) (Reply, error) {
	ctx, cancel := context.WithCancelCause(j.ctx)
	defer cancel(nil)
	stopLife := context.AfterFunc(s.life, func() { cancel(context.Cause(s.life)) })
	defer stopLife()
	var compactNotice string
	if !j.adopted { // before the turn's watchdogs start: the compaction is bound on its own
		compactNotice = s.compactIfDue(ctx, k.key, sess)
	}
	watch := newTurnWatch(s.cfg.TurnDeadline, s.cfg.PostToolQuiet, s.model.WatchFor(s.cfg.ModelUnreachable), cancel)
	watch.expectModel(s.cfg.ModelSilent)
	first := sess.turns == 0
	input := userInput(j.text, j.images)
	var notes turnNotes
	if j.adopted {
		watch.carryOver(j.deadlineLeft)
	}
	live := newLiveTurn(sess.child, sess.threadID, newActivity(ProgressFrom(j.ctx)))
	live.watch = watch
	s.mu.Lock()
	k.live = live
	s.mu.Unlock()
	s.limits.Reached(k.key) // a parked message released at a reset got here: the next may go

	runTurn := func(ctx context.Context, opts appserver.TurnOptions) (*appserver.TurnResult, error) {
		if r, ok := sess.child.(resumable); ok && j.adopted {
			return r.ResumeTurn(ctx, opts)
		}
		return sess.child.RunTurn(ctx, sess.threadID, input, opts)
	}
	res, err := runTurn(ctx, appserver.TurnOptions{
		OnNotification: func(n protocol.Notification) {
			watch.observe(n)
			live.act.observe(n)
			if rl, ok := appserver.RateLimits(n); ok {
				s.limits.Update(rl)
			}
		},
		InterruptGrace: s.cfg.InterruptGrace,
		OnStarted:      live.started,
		Approve:        s.approver(k.key, j.askApprovalsOf, sess, watch, &notes),
		CallTool:       j.callTool,
	})
	watch.stop()
	cause := context.Cause(ctx)

	r := Reply{ChatKey: k.key, ThreadID: sess.threadID, PID: sess.pid, Notices: notes.take()}
	if compactNotice != "" {
		r.Notices = append(r.Notices, compactNotice)
	}
	if first {
		r.NewThread, r.ResumeFailed = sess.newThread, sess.resumeFailed
		if sess.lostThread != "" {
			// Told once: only the first turn of the child that found the thread gone says so.
			r.Notices = append(r.Notices, fmt.Sprintf("the earlier conversation could not be restored: thread %s was not found in CODEX_HOME %s; this is a new conversation (the old id is kept in threads-archive.jsonl)",
				sess.lostThread, s.pool.codexHome()))
		}
		if sess.goneThread != "" {
			r.Notices = append(r.Notices, goneNotice(sess.goneThread))
		}
	}
	// Reaching turn/completed, whatever the status, means the thread has a rollout to resume.
	settled := res != nil && res.Status != "" && res.Status != protocol.TurnInProgress
	if res != nil {
		p := projector.Project(res.Notifications)
		r.TurnID, r.Text, r.Status, r.Duration = res.TurnID, p.Reply, res.Status, res.Duration
		r.Usage = p.Usage
		if res.Error != nil {
			r.Error = res.Error.Message
		}
		s.usage.Add(k.key, r.Usage)
	}

	watchdog, retire := classifyTurn(err, cause, sess.child)
	var trip *tripError
	var limited *UsageLimitError
	unreachable := ""
	resetsAt, limitHit := time.Time{}, false
	if res != nil && err == nil {
		resetsAt, limitHit = appserver.UsageLimit(res.Notifications)
	}
	switch {
	case limitHit:
		// Not the chat's failure: the message runs again after the reset, so the turn that
		// holds only it leaves the thread (as for an unreachable model).
		limited = s.limits.Hit(k.key, resetsAt)
		if settled && r.TurnID != "" {
			sess.dropUnanswered(s.life, r.TurnID)
		}
	case watchdog == WatchdogModelUnreachable && errors.As(cause, &trip):
		unreachable = trip.cause
		s.model.Unreachable(trip.cause, s.log)
		if settled && r.TurnID != "" {
			sess.dropUnanswered(s.life, r.TurnID)
		}
	case settled && r.Status == protocol.TurnCompleted:
		s.model.Reached(s.log)
		s.limits.Cleared()
	}
	if settled && !sess.recorded {
		s.pool.recordThread(k.key, sess)
	}

	recycled := false
	s.mu.Lock()
	s.pool.turnEndedLocked(sess, settled && err == nil)
	switch {
	case sess.state == StateRetiring:
		// The watcher got there first: the child died.
		if watchdog == "" && err != nil {
			watchdog = sess.reason
		}
	case retire != "":
		s.pool.retireLocked(sess, retire, err)
	default:
		// A child that grew too large or old is replaced now, between turns: its reply is
		// good, and the key's next message resumes the thread in a new child.
		if why := s.pool.recycleReasonLocked(sess, time.Now()); why != "" {
			recycled = true
			s.pool.recycleLocked(sess, why)
			break
		}
		s.pool.idleLocked(sess)
	}
	retiring := sess.state == StateRetiring
	s.mu.Unlock()
	if retiring && !recycled {
		// The reply goes out only after the child was reaped: callers may rely on it being gone.
		// A recycled child's turn went well; its reply does not wait for the close.
		<-sess.reaped
	}

	switch {
	case limited != nil:
		sess.log.Info("the account's usage limit kept the message from codex", zap.Time("resets_at", limited.ResetsAt))
		return r, limited
	case watchdog != "":
		sess.log.Warn("turn ended by watchdog", zap.String("watchdog", watchdog), zap.Error(err))
		return r, &WatchdogError{ChatKey: k.key, Watchdog: watchdog, PID: sess.pid, Cause: unreachable, Err: err}
	case err != nil:
		return r, fmt.Errorf("chat %s: codex pid %d: turn: %w", k.key, sess.pid, err)
	}
	return r, nil
}

// dropUnanswered reverts a turn the model never saw from the thread (it holds only the user's
// message): the message is answered later by a turn of its own, and each try of an outage would
// otherwise leave the same message in the history once more. A failure is logged; the history
// then shows the message twice, which is all it costs.
func (sess *session) dropUnanswered(life context.Context, turnID string) {
	ctx, cancel := context.WithTimeout(life, 10*time.Second)
	defer cancel()
	if err := sess.child.RevertThread(ctx, sess.threadID, turnID); err != nil {
		sess.log.Warn("could not drop the unanswered turn from the thread", zap.String("turn_id", turnID), zap.Error(err))
	}
}
