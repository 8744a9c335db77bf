package supervisor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/protocol"
	"github.com/molecule-ai/codex-warm/projector"
	"github.com/molecule-ai/codex-warm/supervisor/progress"
)

// turn runs one turn on a busy session under the turn watchdogs and settles the session.
func (c *chats) turn(k *keyState, sess *session, j *job) (Reply, error) {
	ctx, cancel := context.WithCancelCause(j.ctx)
	defer cancel(nil)
	stopLife := context.AfterFunc(c.life, func() { cancel(context.Cause(c.life)) })
	defer stopLife()
	var compactNotice string
	if !j.adopted { // before the turn's watchdogs start: the compaction is bound on its own
		compactNotice = c.compactIfDue(ctx, k.key, sess)
	}
	watch := newTurnWatch(c.cfg.TurnDeadline, c.cfg.PostToolQuiet, c.model.WatchFor(c.cfg.ModelUnreachable), cancel)
	watch.expectModel(c.cfg.ModelSilent)
	first := sess.turns == 0
	input := userInput(j.text, j.images)
	var notes turnNotes
	if j.adopted {
		watch.carryOver(j.deadlineLeft)
	}
	live := newLiveTurn(sess.child, sess.threadID, progress.NewActivity(progress.From(j.ctx)))
	live.watch = watch
	c.mu.Lock()
	k.live = live
	c.mu.Unlock()
	c.limits.Reached(k.key) // a parked message released at a reset got here: the next may go

	var model, effort string
	if c.cfg.TurnModel != nil {
		model, effort = c.cfg.TurnModel(k.key)
	}
	runTurn := func(ctx context.Context, opts appserver.TurnOptions) (*appserver.TurnResult, error) {
		if r, ok := sess.child.(resumable); ok && j.adopted {
			return r.ResumeTurn(ctx, opts)
		}
		return sess.child.RunTurn(ctx, sess.threadID, input, opts)
	}
	res, err := runTurn(ctx, appserver.TurnOptions{
		OnNotification: func(n protocol.Notification) {
			watch.observe(n)
			live.act.Observe(n)
			if rl, ok := appserver.RateLimits(n); ok {
				c.limits.Update(rl)
			}
		},
		InterruptGrace: c.cfg.InterruptGrace,
		OnStarted:      live.started,
		Approve:        c.approver(k.key, j.askApprovalsOf, sess, watch, &notes),
		CallTool:       j.callTool,
		Model:          model,
		Effort:         effort,
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
				sess.lostThread, c.pool.codexHome()))
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
		c.usage.Add(k.key, r.Usage)
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
		limited = c.limits.Hit(k.key, resetsAt)
		if settled && r.TurnID != "" {
			sess.dropUnanswered(c.life, r.TurnID)
		}
	case watchdog == WatchdogModelUnreachable && errors.As(cause, &trip):
		unreachable = trip.cause
		c.model.Unreachable(trip.cause, c.log)
		if settled && r.TurnID != "" {
			sess.dropUnanswered(c.life, r.TurnID)
		}
	case settled && r.Status == protocol.TurnCompleted:
		c.model.Reached(c.log)
		c.limits.Cleared()
	}
	if settled && !sess.recorded {
		c.pool.recordThread(k.key, sess)
	}

	recycled := false
	c.mu.Lock()
	c.pool.turnEndedLocked(sess, settled && err == nil)
	switch {
	case sess.state == StateRetiring:
		// The watcher got there first: the child died.
		if watchdog == "" && err != nil {
			watchdog = sess.reason
		}
	case retire != "":
		c.pool.retireLocked(sess, retire, err)
	default:
		// A child that grew too large or old is replaced now, between turns: its reply is
		// good, and the key's next message resumes the thread in a new child.
		if why := c.pool.recycleReasonLocked(sess, time.Now()); why != "" {
			recycled = true
			c.pool.recycleLocked(sess, why)
			break
		}
		c.pool.idleLocked(sess)
	}
	retiring := sess.state == StateRetiring
	c.mu.Unlock()
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

// approver is the appserver.Approver of a turn of chatKey whose prompts go to chat askedOf: it
// publishes each request, pauses the turn's watchdogs and waits for askedOf's Answer, the
// approval timeout or the turn's end.
func (c *chats) approver(chatKey, askedOf string, sess *session, watch *turnWatch, notes *turnNotes) appserver.Approver {
	if askedOf == "" {
		askedOf = chatKey
	}
	return func(ctx context.Context, req appserver.ApprovalRequest) (string, error) {
		if why := unshowable(req); why != "" {
			// Declined without asking: a prompt that cut it would let a person approve what
			// they were not shown. The chat learns why from its reply, codex from the decline.
			sess.log.Warn("approval declined without asking: it cannot be shown whole",
				zap.String("request_id", req.RequestID), zap.Int("command_bytes", len(req.Command)), zap.Int("cwd_bytes", len(req.Cwd)))
			notes.add("declined without asking you: " + why)
			return protocol.DecisionDecline, nil
		}
		resume := watch.waitOnPerson()
		defer resume()
		timeout := c.cfg.ApprovalTimeout
		p := c.approvals.publish(chatKey, askedOf, req, timeout)
		defer c.approvals.remove(p)
		log := sess.log.With(zap.String("request_id", req.RequestID), zap.String("kind", req.Kind))
		log.Info("approval asked in the chat", zap.String("command", req.Command), zap.Duration("timeout", timeout))
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		select {
		case d := <-p.answer:
			return d, nil
		case <-timer.C:
			log.Info("nobody answered the approval; declining", zap.Duration("timeout", timeout))
			return protocol.DecisionDecline, nil
		case <-ctx.Done():
			return "", fmt.Errorf("chat %s: approval %s: %w", chatKey, req.RequestID, context.Cause(ctx))
		}
	}
}
