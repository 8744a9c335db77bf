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
	"github.com/molecule-ai/codex-warm/supervisor/turnwatch"
)

// turnOptions is everything a turn takes besides its chat, child and thread: what the message
// gives codex, who decides for it, and the chat's model and effort. It is one struct, carried by the job from enqueue (or
// from a reload's adoption) to the turn, so that a per-chat setting such as a model or a
// reasoning effort reaches the turn as one more field here, set where the message is taken and
// used in runTurn.
type turnOptions struct {
	text   string
	images []string // data URLs codex gets as image inputs after the text
	// askApprovalsOf is Input.AskApprovalsOf; callTool is Input.CallTool.
	askApprovalsOf string
	callTool       appserver.ToolHandler
	// resume: the turn runs in the child already, handed over by the previous image (adopted),
	// with deadlineLeft of its deadline.
	resume       bool
	deadlineLeft time.Duration
	// model and effort are the chat's (Config.TurnModel), read as the turn starts.
	model, effort string
}

// turnEnd is what a turn's result means for the chat and its child (judge).
type turnEnd struct {
	settled     bool   // the turn reached turn/completed: the thread has a rollout to resume
	watchdog    string // the watchdog that ended it, "" for none
	retire      string // why the child is retired after it, "" to keep it
	limited     *UsageLimitError
	unreachable string // what codex said of a model it could not reach
}

// turn runs one turn of opts on a busy session under the turn watchdogs and settles the
// session. ctx is the job's.
func (c *chats) turn(ctx context.Context, k *keyState, sess *session, opts turnOptions) (Reply, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopLife := context.AfterFunc(c.life, func() { cancel(context.Cause(c.life)) })
	defer stopLife()
	var compactNotice string
	if !opts.resume { // before the turn's watchdogs start: the compaction is bound on its own
		compactNotice = c.compactIfDue(ctx, k.key, sess)
	}
	first := sess.turns == 0
	watch, live := c.beginTurn(ctx, k, sess, opts, cancel)
	if c.cfg.TurnModel != nil { // the chat's model and effort as they are when its turn starts
		opts.model, opts.effort = c.cfg.TurnModel(k.key)
	}
	var notes turnNotes
	res, err := c.runTurn(ctx, k, sess, opts, watch, live, &notes)
	watch.Stop()
	cause := context.Cause(ctx)

	r := c.turnReply(k.key, sess, first, res, notes.take(), compactNotice)
	end := c.judge(k.key, sess, res, r, err, cause)
	end.watchdog = c.settle(sess, end, err)
	switch {
	case end.limited != nil:
		sess.log.Info("the account's usage limit kept the message from codex", zap.Time("resets_at", end.limited.ResetsAt))
		return r, end.limited
	case end.watchdog != "":
		sess.log.Warn("turn ended by watchdog", zap.String("watchdog", end.watchdog), zap.Error(err))
		return r, &WatchdogError{ChatKey: k.key, Watchdog: end.watchdog, PID: sess.pid, Cause: end.unreachable, Err: err}
	case err != nil:
		return r, fmt.Errorf("chat %s: codex pid %d: turn: %w", k.key, sess.pid, err)
	}
	return r, nil
}

// beginTurn arms the turn's watchdogs (cancel ends the turn when one trips) and makes the turn
// k's live turn, which later messages can be steered into and the status table shows.
func (c *chats) beginTurn(ctx context.Context, k *keyState, sess *session, opts turnOptions, cancel context.CancelCauseFunc) (*turnwatch.Watch, *liveTurn) {
	watch := turnwatch.New(c.cfg.TurnDeadline, c.cfg.PostToolQuiet, c.model.WatchFor(c.cfg.ModelUnreachable), cancel)
	watch.ExpectModel(c.cfg.ModelSilent)
	if opts.resume {
		watch.CarryOver(opts.deadlineLeft)
	}
	live := newLiveTurn(sess.child, sess.threadID, progress.NewActivity(progress.From(ctx)), watch)
	c.st.do(func(t *table) { t.turnBegan(k, live) })
	c.limits.Reached(k.key) // a parked message released at a reset got here: the next may go
	return watch, live
}

// turnBegan makes live k's running turn. A freeze waiting for quiet looks again: a running turn
// can cross a reload only once it is live (table.handable).
func (t *table) turnBegan(k *keyState, live *liveTurn) {
	k.live = live
	t.freeze.notify()
}

// runTurn runs the turn on the child (or goes on with the one handed over), feeding its
// notifications to the watchdogs, the activity line and the account's limits.
func (c *chats) runTurn(ctx context.Context, k *keyState, sess *session, opts turnOptions, watch *turnwatch.Watch, live *liveTurn, notes *turnNotes) (*appserver.TurnResult, error) {
	to := appserver.TurnOptions{
		OnNotification: func(n protocol.Notification) {
			watch.Observe(n)
			live.act.Observe(n)
			if rl, ok := appserver.RateLimits(n); ok {
				c.limits.Update(rl)
			}
		},
		InterruptGrace: c.cfg.InterruptGrace,
		OnStarted:      live.started,
		Approve:        c.approver(k.key, opts.askApprovalsOf, sess, watch, notes),
		CallTool:       opts.callTool,
		Model:          opts.model,
		Effort:         opts.effort,
	}
	if r, ok := sess.child.(resumable); ok && opts.resume {
		return r.ResumeTurn(ctx, to)
	}
	return sess.child.RunTurn(ctx, sess.threadID, userInput(opts.text, opts.images), to)
}

// turnReply is the chat's reply of a turn that ended with res (nil when it never ran), with
// the notices the turn and its child owe the chat.
func (c *chats) turnReply(chatKey string, sess *session, first bool, res *appserver.TurnResult, notices []string, compactNotice string) Reply {
	r := Reply{ChatKey: chatKey, ThreadID: sess.threadID, PID: sess.pid, Notices: notices}
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
	if res != nil {
		p := projector.Project(res.Notifications)
		r.TurnID, r.Text, r.Status, r.Duration = res.TurnID, p.Reply, res.Status, res.Duration
		r.Usage = p.Usage
		if res.Error != nil {
			r.Error = res.Error.Message
		}
		c.usage.Add(chatKey, r.Usage)
	}
	return r
}

// judge says what the turn's end means: a watchdog's, the account's usage limit, a model that
// could not be reached (both leave the message's turn out of the thread: the message runs again
// later), or a completed turn; it records the thread of a settled turn.
func (c *chats) judge(chatKey string, sess *session, res *appserver.TurnResult, r Reply, err, cause error) turnEnd {
	var end turnEnd
	// Reaching turn/completed, whatever the status, means the thread has a rollout to resume.
	end.settled = res != nil && res.Status != "" && res.Status != protocol.TurnInProgress
	end.watchdog, end.retire = classifyTurn(err, cause, sess.child)
	var trip *turnwatch.TripError
	resetsAt, limitHit := time.Time{}, false
	if res != nil && err == nil {
		resetsAt, limitHit = appserver.UsageLimit(res.Notifications)
	}
	switch {
	case limitHit:
		// Not the chat's failure: the message runs again after the reset, so the turn that
		// holds only it leaves the thread (as for an unreachable model).
		end.limited = c.limits.Hit(chatKey, resetsAt)
		if end.settled && r.TurnID != "" {
			sess.dropUnanswered(c.life, r.TurnID)
		}
	case end.watchdog == WatchdogModelUnreachable && errors.As(cause, &trip):
		end.unreachable = trip.Cause
		c.model.Unreachable(trip.Cause, c.log)
		if end.settled && r.TurnID != "" {
			sess.dropUnanswered(c.life, r.TurnID)
		}
	case end.settled && r.Status == protocol.TurnCompleted:
		c.model.Reached(c.log)
		c.limits.Cleared()
	}
	if end.settled && !sess.recorded {
		c.pool.recordThread(chatKey, sess)
	}
	return end
}

// settle closes the session's books on the turn (turnSettled) and, when its child is retired,
// waits until it was reaped: callers may rely on it being gone when the reply goes out. It
// returns the watchdog that ended the turn.
func (c *chats) settle(sess *session, end turnEnd, err error) string {
	var watchdog string
	var retiring, recycled bool
	c.st.do(func(t *table) { watchdog, retiring, recycled = t.turnSettled(sess, end, err) })
	if retiring && !recycled {
		// A recycled child's turn went well; its reply does not wait for the close.
		<-sess.reaped
	}
	return watchdog
}

// turnSettled counts sess's turn and moves sess on: retired (for end.retire, or already by its
// watcher, whose reason is then the watchdog of a failed turn), recycled (grown too large or
// old: replaced now, between turns, and the key's next message resumes the thread in a new
// child), or idle again.
func (t *table) turnSettled(sess *session, end turnEnd, err error) (watchdog string, retiring, recycled bool) {
	watchdog = end.watchdog
	t.turnEnded(sess, end.settled && err == nil)
	switch {
	case sess.state == StateRetiring:
		// The watcher got there first: the child died.
		if watchdog == "" && err != nil {
			watchdog = sess.reason
		}
	case end.retire != "":
		t.retire(sess, end.retire, err)
	default:
		if why := t.recycleReason(sess, time.Now()); why != "" {
			recycled = true
			t.recycle(sess, why)
			break
		}
		t.idle(sess)
	}
	return watchdog, sess.state == StateRetiring, recycled
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
func (c *chats) approver(chatKey, askedOf string, sess *session, watch *turnwatch.Watch, notes *turnNotes) appserver.Approver {
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
		resume := watch.WaitOnPerson()
		defer resume()
		timeout := c.cfg.ApprovalTimeout
		p := c.approvals.Publish(chatKey, askedOf, req, timeout)
		defer c.approvals.Remove(p)
		log := sess.log.With(zap.String("request_id", req.RequestID), zap.String("kind", req.Kind))
		log.Info("approval asked in the chat", zap.String("command", req.Command), zap.Duration("timeout", timeout))
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		select {
		case d := <-p.Answered():
			return d, nil
		case <-timer.C:
			log.Info("nobody answered the approval; declining", zap.Duration("timeout", timeout))
			return protocol.DecisionDecline, nil
		case <-ctx.Done():
			return "", fmt.Errorf("chat %s: approval %s: %w", chatKey, req.RequestID, context.Cause(ctx))
		}
	}
}
