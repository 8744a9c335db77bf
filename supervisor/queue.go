package supervisor

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/protocol"
	"github.com/molecule-ai/codex-warm/supervisor/images"
)

// job is one Submit call: a message waiting in, or being run by, its key's worker.
type job struct {
	key  *keyState // stays in chats.keys while the key's worker runs
	ctx  context.Context
	text string
	// images are data URLs codex gets as image inputs after the text.
	images []string
	// askApprovalsOf is Input.AskApprovalsOf.
	askApprovalsOf string
	// callTool is Input.CallTool.
	callTool appserver.ToolHandler
	// notices say which images of the message codex is not shown, and why (Reply.Notices).
	notices []string
	// reset marks a Reset: the worker starts the chat over instead of running a turn.
	reset bool
	// maint, when set, runs on the key's worker instead of a turn (retention.go).
	maint func(k *keyState) (Reply, error)
	// messageID is Input.MessageID; handed is closed when a reload hands the job over (its
	// waiting caller gets ErrHandedOver); unlink ends the tie of the running job to its
	// caller's context. adopted marks the running turn the previous image handed over.
	messageID string
	handed    chan struct{}
	unlink    func() bool
	adopted   bool
	// deadlineLeft is what remained of an adopted turn's deadline at the reload; turnStarted
	// is when the turn began in the previous image (status's TURN AGE goes on from it).
	deadlineLeft time.Duration
	turnStarted  time.Time
	// cancel ends ctx (see takeLocked); nil while the job waits.
	cancel context.CancelCauseFunc
	// startedChild is set by the key's worker when the job started a child or took a spare.
	startedChild bool
	done         chan outcome // buffered: the worker never blocks on a caller that left
}

type outcome struct {
	reply        Reply
	err          error
	startedChild bool
}

// Submit runs text as the next turn of chatKey's conversation and returns its reply.
//
// Turns of one chat key run one at a time in the order Submit was called; Submit waits its turn.
// When ctx is done while the message waits, it leaves the queue without running; when ctx is done
// while its turn runs, the turn is interrupted. Either way Submit returns at once with ctx's
// cause.
//
// Errors: Config.Admit's (wrapped), ErrQueueFull, ErrClosed, ErrNoSlot (wrapped),
// *CrashLoopError, *WatchdogError (the turn was ended by a watchdog; the returned Reply holds what
// the turn produced, if anything), or a wrapped spawn/turn error. A turn that codex itself
// reports as failed is not an error: see Reply.Status and Reply.Error.
func (s *Supervisor) Submit(ctx context.Context, chatKey string, text string) (Reply, error) {
	return s.SubmitInput(ctx, chatKey, Input{Text: text})
}

// Input is one message for codex: its text and the images that came with it.
type Input struct {
	Text string
	// Images are data URLs (data:image/png;base64,...), given to codex as image inputs after the
	// text, in order.
	Images []string
	// Received is when the inbox received the message, zero when it does not say. A Stop of
	// the chat after Received drops the message even when it reaches the supervisor only after
	// the Stop: the inbox was still handing it over when the chat asked to stop.
	Received time.Time
	// AskApprovalsOf is the chat shown the approval prompts of this message's turn, the only one
	// whose /approve and /deny answer them (Approval.AskedOf); empty: the message's own chat. The
	// turn's first message decides it; one steered into a running turn (BusySteer) joins that
	// turn's party.
	AskApprovalsOf string
	// MessageID names the message for good (the Molecule row's activity id); empty when it has
	// none. A message with an id can cross a reload: its turn is handed to the next image, its
	// caller is told ErrHandedOver, and the same message given again attaches to the turn
	// instead of running a second one.
	MessageID string
	// CallTool answers the turn's calls of client-defined tools (appserver.Config.DynamicTools,
	// e.g. send_file): the caller decides what the agent may do for this message. The turn's
	// first message decides it; nil refuses the calls.
	CallTool appserver.ToolHandler
}

// userInput is in as turn/start and turn/steer input.
func userInput(text string, images []string) []protocol.UserInput {
	input := make([]protocol.UserInput, 0, 1+len(images))
	input = append(input, protocol.UserInput{Type: "text", Text: text})
	for _, url := range images {
		input = append(input, protocol.UserInput{Type: "image", URL: url})
	}
	return input
}

// SubmitInput is Submit for a message that may carry images.
func (s *Supervisor) SubmitInput(ctx context.Context, chatKey string, in Input) (Reply, error) {
	start := time.Now()
	t, err := s.EnqueueInput(ctx, chatKey, in)
	if err != nil {
		s.chats.observe(chatKey, start, outcome{reply: Reply{ChatKey: chatKey}, err: err})
		return Reply{ChatKey: chatKey}, err
	}
	return t.Wait()
}

// observe reports one message's outcome to Config.OnTurn, with how long its caller waited.
func (c *chats) observe(chatKey string, start time.Time, o outcome) {
	if c.cfg.OnTurn != nil {
		c.cfg.OnTurn(TurnEvent{ChatKey: chatKey, Reply: o.reply, Err: o.err, Latency: time.Since(start), StartedChild: o.startedChild})
	}
}

// Ticket is a message Enqueue accepted. Wait returns its reply.
type Ticket struct {
	c   *chats
	ctx context.Context
	k   *keyState
	j   *job
	// joined is the running turn the message was steered into (BusySteer), nil when queued.
	joined *liveTurn
	// now is the outcome of a message steered into a turn that ended before Enqueue returned.
	now *outcome
	// start is when Enqueue was called, for Config.OnTurn's latency.
	start time.Time
	// handed is closed when a reload hands the message's turn over (job.handed).
	handed chan struct{}
}

// Enqueue is the first half of Submit: it returns once the message is queued behind the chat's
// earlier messages (or, under BusySteer, added to the running turn), with Submit's errors of
// that stage (Admit's, ErrQueueFull, ErrClosed, ctx's). A caller that hands over a chat's
// messages in order with Enqueue keeps their order without waiting for their replies. ctx
// governs the message as in Submit, until its Wait returns.
func (s *Supervisor) Enqueue(ctx context.Context, chatKey string, text string) (*Ticket, error) {
	return s.EnqueueInput(ctx, chatKey, Input{Text: text})
}

// EnqueueInput is Enqueue for a message that may carry images.
func (s *Supervisor) EnqueueInput(ctx context.Context, chatKey string, in Input) (*Ticket, error) {
	return s.chats.enqueue(ctx, chatKey, in)
}

func (c *chats) enqueue(ctx context.Context, chatKey string, in Input) (*Ticket, error) {
	start := time.Now()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("chat %s: %w", chatKey, context.Cause(ctx))
	}
	if c.cfg.Admit != nil {
		if err := c.cfg.Admit(ctx, chatKey); err != nil {
			return nil, fmt.Errorf("chat %s: %w", chatKey, err)
		}
	}
	j := &job{ctx: ctx, text: in.Text, images: in.Images, askApprovalsOf: in.AskApprovalsOf, callTool: in.CallTool, done: make(chan outcome, 1),
		messageID: in.MessageID, handed: make(chan struct{})}
	if c.cfg.MaxImagePixels > 0 && len(in.Images) > 0 {
		// Every image reaches codex through here: a bomb is refused before any child decodes it.
		j.images, j.notices = images.Screen(in.Images, c.cfg.MaxImagePixels)
		for _, n := range j.notices {
			j.text += "\n\n[" + n + "]"
			c.log.Warn("image refused", zap.String("chat_key", chatKey), zap.String("why", n))
		}
	}

	c.mu.Lock()
	if c.handover.refusing() {
		c.mu.Unlock()
		return nil, fmt.Errorf("chat %s: %w", chatKey, ErrReloading)
	}
	if d := c.handover.attach(chatKey, in.MessageID); d != nil {
		// The message's turn runs already (handed over by a reload): wait for it. Even while
		// shutting down: the drain lets that turn finish, and its caller is owed its answer
		// (a stop that came during the reload resumes the old image and drains at once).
		d.handed = make(chan struct{})
		c.mu.Unlock()
		c.log.Info("message attached to its turn, handed over by a reload", zap.String("chat_key", chatKey),
			zap.String("message_id", in.MessageID))
		return &Ticket{c: c, ctx: ctx, k: d.key, j: d, handed: d.handed, start: start}, nil
	}
	if c.pool.closedLocked() {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if c.stops.stoppedSinceLocked(chatKey, in.Received) {
		c.mu.Unlock()
		c.log.Info("message dropped: the chat asked to stop after it was received", zap.String("chat_key", chatKey))
		return nil, fmt.Errorf("chat %s: dropped: %w", chatKey, ErrStopped)
	}
	k := c.keyLocked(chatKey)
	if err := c.queueRoomLocked(chatKey); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	j.key = k
	if lt := c.steerTargetLocked(k); lt != nil {
		c.mu.Unlock()
		if now, ok := c.steer(ctx, k, lt, j); ok {
			return &Ticket{c: c, ctx: ctx, k: k, j: j, joined: lt, now: now, start: start}, nil
		}
		c.mu.Lock()
		// While codex was asked, the supervisor may have closed or frozen, and other messages
		// may have filled the chat's queue: the message meets the checks of any other.
		switch {
		case c.pool.closedLocked():
			c.mu.Unlock()
			return nil, ErrClosed
		case c.handover.refusing():
			c.mu.Unlock()
			return nil, fmt.Errorf("chat %s: %w", chatKey, ErrReloading)
		}
		if err := c.queueRoomLocked(chatKey); err != nil {
			c.mu.Unlock()
			return nil, err
		}
		// The key may have been forgotten while codex was asked: the turn ended, the chat idled.
		k = c.keyLocked(chatKey)
		j.key = k
	}
	c.interruptLocked(k)
	c.queue.PushLocked(chatKey, j)
	c.mu.Unlock()
	return &Ticket{c: c, ctx: ctx, k: k, j: j, handed: j.handed, start: start}, nil
}

// queueRoomLocked is ErrQueueFull, wrapped, when chatKey's queue is at its cap.
func (c *chats) queueRoomLocked(chatKey string) error {
	if n := c.queue.LenLocked(chatKey); n >= c.cfg.MaxQueuePerKey {
		return fmt.Errorf("chat %s: %d messages waiting: %w", chatKey, n, ErrQueueFull)
	}
	return nil
}

// keyLocked returns chatKey's state, creating it.
func (c *chats) keyLocked(chatKey string) *keyState {
	k := c.keys[chatKey]
	if k == nil {
		k = &keyState{key: chatKey}
		c.keys[chatKey] = k
	}
	return k
}

// Wait returns the message's reply, as Submit does. Call it once.
func (t *Ticket) Wait() (Reply, error) {
	o := t.wait()
	if len(t.j.notices) > 0 {
		// Per message, also when the reply is a turn other messages share (steered).
		o.reply.Notices = append(slices.Clip(o.reply.Notices), t.j.notices...)
	}
	t.c.observe(t.k.key, t.start, o)
	return o.reply, o.err
}

func (t *Ticket) wait() outcome {
	if t.now != nil {
		return *t.now
	}
	select {
	case o := <-t.j.done:
		return o
	case <-t.handed:
		// Freeze took the job out of the queue, or handed its running turn over.
		return outcome{reply: Reply{ChatKey: t.k.key}, err: fmt.Errorf("chat %s: %w", t.k.key, ErrHandedOver)}
	case <-t.ctx.Done():
	}
	if t.joined != nil {
		t.joined.leave(t.j)
	} else {
		c := t.c
		c.mu.Lock()
		c.queue.RemoveLocked(t.k.key, func(q *job) bool { return q == t.j })
		if t.k.running == t.j && !isClosed(t.j.handed) {
			// The job ends now rather than when context.AfterFunc's goroutine gets to it, so
			// that a slot freed meanwhile is not taken for a message nobody waits for.
			t.j.cancel(context.Cause(t.ctx))
		}
		c.gcKeyLocked(t.k)
		c.mu.Unlock()
	}
	// The job may have finished in the meantime; prefer its answer.
	select {
	case o := <-t.j.done:
		return o
	default:
	}
	return outcome{reply: Reply{ChatKey: t.k.key}, err: fmt.Errorf("chat %s: %w", t.k.key, context.Cause(t.ctx))}
}

// takeLocked runs as the key's worker takes j out of the queue (keyfifo's Take), with c.mu
// held: j becomes the key's running job, under a context Stop and BusyInterrupt can cancel,
// at the moment it stops being queued. Were that left to work, a Stop in between would find j
// neither queued nor running, and j would run unstopped.
func (c *chats) takeLocked(_ string, j *job) {
	// The caller leaving ends the job, until a reload hands it over (unlink).
	caller := j.ctx
	j.ctx, j.cancel = context.WithCancelCause(context.WithoutCancel(caller))
	cancel := j.cancel
	j.unlink = context.AfterFunc(caller, func() { cancel(context.Cause(caller)) })
	if caller.Err() != nil {
		cancel(context.Cause(caller)) // gone already: not a moment's run on AfterFunc's delay
	}
	j.key.running, j.key.stopRun = j, j.cancel
}

// isClosed reports whether ch is closed; a nil ch never is.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// work runs one job on its key's worker (see chats.queue) and answers its caller. The job
// runs under the context takeLocked gave it.
func (c *chats) work(_ string, j *job) {
	k := j.key
	defer j.cancel(nil)
	defer j.unlink()
	var r Reply
	var err error
	switch {
	case j.maint != nil:
		r, err = j.maint(k)
	case j.reset:
		r, err = c.reset(k)
	default:
		r, err = c.run(k, j)
	}
	c.mu.Lock()
	k.running, k.stopRun = nil, nil
	live := k.live
	k.live = nil
	k.lastErr = ""
	if err != nil {
		k.lastErr = err.Error()
	}
	c.mu.Unlock()
	r.ChatKey = k.key
	if live != nil {
		live.finish(outcome{reply: r, err: err})
	}
	j.done <- outcome{reply: r, err: err, startedChild: j.startedChild}
}

// keyIdleLocked is called as a key's worker exits.
func (c *chats) keyIdleLocked(key string) {
	c.handover.notify()
	if k := c.keys[key]; k != nil {
		c.gcKeyLocked(k)
	}
}

func (c *chats) run(k *keyState, j *job) (Reply, error) {
	if j.ctx.Err() != nil {
		return Reply{}, fmt.Errorf("chat %s: %w", k.key, context.Cause(j.ctx))
	}
	if at, unknown, ok := c.limits.Refusing(); ok && !j.adopted {
		// The account's limit, met by any chat: no child is started or used before the reset.
		c.limits.Reached(k.key)
		return Reply{}, &UsageLimitError{ChatKey: k.key, ResetsAt: at, UnknownReset: unknown}
	}
	sess, err := c.pool.acquire(k, j)
	if err != nil {
		return Reply{}, err
	}
	if j.ctx.Err() != nil {
		// Stopped, or the caller left, while its child started: the turn never begins.
		c.mu.Lock()
		c.pool.idleLocked(sess)
		c.mu.Unlock()
		return Reply{}, fmt.Errorf("chat %s: %w", k.key, context.Cause(j.ctx))
	}
	return c.turn(k, sess, j)
}

// onWorker runs fn on chatKey's worker, so that no message of the chat runs meanwhile (a message
// that arrives waits); retire, for fn, retires the chat's child and waits until it was reaped.
// busy is true, and fn does not run, when the chat has a turn running or messages waiting.
func (c *chats) onWorker(ctx context.Context, chatKey string, fn func(k *keyState, retire func()) error) (busy bool, err error) {
	return c.onWorkerWait(ctx, chatKey, false, fn)
}

// onWorkerWait is onWorker; with wait, fn runs after the chat's running and queued messages
// instead, and busy says it waited for them.
func (c *chats) onWorkerWait(ctx context.Context, chatKey string, wait bool, fn func(k *keyState, retire func()) error) (busy bool, err error) {
	j := &job{ctx: context.WithoutCancel(ctx), done: make(chan outcome, 1)}
	j.maint = func(k *keyState) (Reply, error) {
		return Reply{}, fn(k, func() {
			c.mu.Lock()
			sess := k.sess
			if sess != nil {
				c.pool.retireLocked(sess, ReasonArchived, nil)
			}
			c.mu.Unlock()
			if sess != nil {
				<-sess.reaped
			}
		})
	}
	c.mu.Lock()
	if c.pool.closedLocked() {
		c.mu.Unlock()
		return false, ErrClosed
	}
	if c.handover.active() {
		c.mu.Unlock()
		return false, ErrReloading
	}
	if k := c.keys[chatKey]; k != nil && (k.running != nil || c.queue.LenLocked(chatKey) > 0) {
		busy = true
	}
	if busy && !wait {
		c.mu.Unlock()
		return true, nil
	}
	k := c.keyLocked(chatKey)
	j.key = k
	c.queue.PushLocked(chatKey, j)
	c.mu.Unlock()
	o := <-j.done
	return busy, o.err
}
