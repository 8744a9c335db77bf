package appserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sourcegraph/jsonrpc2"
	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// TurnOptions tune one RunTurn.
type TurnOptions struct {
	// OnNotification, if set, is called with each of the turn's notifications in order, from a
	// goroutine owned by the client, and never after RunTurn returned. It must not block long
	// (it holds up every later message of the child) and must not call Close or RunTurn on the
	// same client (Close waits for it). Cancelling RunTurn's ctx from it is fine.
	OnNotification func(protocol.Notification)
	// InterruptGrace is how long RunTurn waits, once ctx is done, for the turn to end after
	// turn/interrupt (and, before that, for the turn/start response). Default
	// DefaultInterruptGrace.
	InterruptGrace time.Duration
	// OnStarted, if set, is called once with the turn's id as soon as codex has answered
	// turn/start, from RunTurn's goroutine: from then on the turn can be steered (SteerTurn).
	OnStarted func(turnID string)
	// Approve decides the turn's approval requests when the client's Policy says DecisionAsk.
	// It is called from a goroutine of its own, so it may wait for a person; its context ends
	// with the turn. Nil declines them.
	Approve Approver
	// CallTool answers the turn's calls of client-defined tools (Config.DynamicTools). It is
	// called from a goroutine of its own; its context ends with the turn. Nil refuses them.
	CallTool ToolHandler
	// Model and Effort go with turn/start: codex applies them to this turn and every later one
	// of the thread and writes them into its rollout, so a caller that ever sets them sets them
	// on every turn (the chat's resolved model and effort). Empty leaves the thread's own.
	Model, Effort string
}

// TurnResult is the raw outcome of one turn: what codex reported, undigested. The reply text,
// token usage and the like are derived from Notifications by whoever needs them
// (projector.Project), so there is one source of truth for them.
type TurnResult struct {
	ThreadID string
	TurnID   string
	// Status is protocol.TurnCompleted, TurnInterrupted or TurnFailed from turn/completed; empty
	// when turn/completed never arrived or carried no status (RunTurn then also returns an
	// error; for the latter one wrapping ErrProtocol).
	Status string
	// Error is turn.error of a failed (or interrupted) turn.
	Error *protocol.TurnError
	// Notifications are the turn's notifications, in arrival order. They include the items
	// (item/completed, turn/completed's turn.items) and token usage
	// (thread/tokenUsage/updated).
	Notifications []protocol.Notification
	// Duration is measured locally, from turn/start to the end of RunTurn.
	Duration time.Duration
}

// RunTurn sends turn/start with input on threadID and returns when turn/completed for that turn
// arrives. A failed turn is a result, not an error, except when it failed because codex is not
// logged in: then the error is an *AuthError.
//
// When ctx is done (cancel or deadline) it sends turn/interrupt and waits InterruptGrace for
// turn/completed: it then returns the (interrupted) result and an error wrapping
// context.Cause(ctx) (no error if the turn had completed normally after all). Past the grace it
// returns an error wrapping ErrWedged, and the client accepts no further turns on that thread
// (Wedged). When the child dies it returns at once an error wrapping ErrChildExited that carries the stderr tail. Once the
// turn id is known, the result is non-nil even alongside an error and holds what arrived.
//
// One turn runs at a time per thread: a RunTurn while another is in progress on the same thread
// fails at once with ErrTurnInProgress, because codex would merge the second turn into the
// first. Turns of different threads of the child run side by side.
func (c *Client) RunTurn(ctx context.Context, threadID string, input []protocol.UserInput, opts TurnOptions) (*TurnResult, error) {
	return c.runTurnGated(ctx, threadID, input, opts, false)
}

// runTurnGated is RunTurn; warmUp says the turn is a spare's throwaway one (WarmUp), which
// holds the turn gate lightly and needs no ChatGPT token.
func (c *Client) runTurnGated(ctx context.Context, threadID string, input []protocol.UserInput, opts TurnOptions, warmUp bool) (*TurnResult, error) {
	release, err := c.claim("run turn", threadID)
	if err != nil {
		return nil, err
	}
	defer release()
	enter, leave := c.gate.enter, func() { c.gate.leave() }
	if warmUp {
		enter, leave = c.gate.enterLight, c.gate.leaveLight
	}
	if err := enter(ctx); err != nil {
		return nil, fmt.Errorf("run turn on thread %s: waiting for a token push to codex pid %d: %w", threadID, c.pid, err)
	}
	defer leave()
	if c.threadWedged(threadID) {
		return nil, fmt.Errorf("run turn on thread %s: %w: codex pid %d still has a turn of it that was not interrupted", threadID, ErrWedged, c.pid)
	}
	if err := c.Err(); err != nil {
		return nil, fmt.Errorf("run turn on thread %s: %w", threadID, err)
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("run turn on thread %s: %w", threadID, context.Cause(ctx))
	}
	if !warmUp && c.cfg.Tokens != nil && c.cfg.Tokens.Login().AccessToken != c.heldToken() && c.gate.running() == 1 {
		// A token the daemon got while this child was busy, not handed over yet: a turn never
		// starts with a token the daemon already replaced. With other threads' turns running
		// the swap would fail their model requests: pushTokens hands it over in a gap.
		if err := c.logIn(ctx); err != nil {
			log := c.logger().With(zap.String("thread", threadID))
			log.Warn("could not hand the new ChatGPT token to codex before the turn; it asks for one on a 401", zap.Error(err))
		}
	}
	renewed := new(atomic.Bool)
	r, err := c.runTurn(ctx, threadID, input, opts, renewed)
	if err != nil && renewed.Load() && startRefused(err) && ctx.Err() == nil {
		// The same renewal met during turn/start itself: codex 0.171 refuses the turn while it
		// loads its configuration ("failed to load configuration: application network
		// permission was revoked"). No turn was created, so it is simply asked for again, once.
		c.logger().Info("turn/start refused right after codex's ChatGPT token was renewed; asking again",
			zap.String("thread", threadID), zap.Error(err))
		renewed.Store(false)
		r, err = c.runTurn(ctx, threadID, input, opts, renewed)
	}
	if err == nil && renewed.Load() && unansweredFailure(r) && ctx.Err() == nil {
		// The model refused the token, the child got a new one from the daemon, and codex
		// 0.169 still failed the turn before the model saw it ("application network policy is
		// unavailable"); the child's next turn works. Nothing was answered, so the turn runs
		// again, once, after the failed one is dropped from the thread.
		c.logger().Info("turn failed right after its ChatGPT token was renewed, before the model answered; running it again",
			zap.String("thread", threadID), zap.String("turn", r.TurnID), zap.String("error", turnErrorText(r)))
		if rerr := c.RevertThread(ctx, threadID, r.TurnID); rerr != nil {
			c.logger().Warn("could not drop the failed turn before running it again", zap.Error(rerr))
		}
		r, err = c.runTurn(ctx, threadID, input, opts, nil)
	}
	if err == nil && r.Status == protocol.TurnCompleted {
		c.turned.Store(true)
	}
	return r, err
}

// startRefused reports a turn/start that codex answered with an error (so no turn exists), other
// than for a thread it does not know: runTurn's only JSON-RPC errors are turn/start's.
func startRefused(err error) bool {
	var re *jsonrpc2.Error
	return errors.As(err, &re) && re.Code == protocol.CodeInvalidRequest && !errors.Is(err, ErrThreadNotFound)
}

// unansweredFailure reports a failed turn whose only item is the user's message: the model
// produced nothing, and no tool ran.
func unansweredFailure(r *TurnResult) bool {
	if r == nil || r.Status != protocol.TurnFailed {
		return false
	}
	for _, n := range r.Notifications {
		if n.Method != protocol.NotifyItemStarted && n.Method != protocol.NotifyItemCompleted {
			continue
		}
		var it struct {
			Item struct {
				Type string `json:"type"`
			} `json:"item"`
		}
		if json.Unmarshal(n.Params, &it) != nil || it.Item.Type != protocol.ItemUserMessage {
			return false
		}
	}
	return true
}

func turnErrorText(r *TurnResult) string {
	if r.Error == nil {
		return ""
	}
	return r.Error.Message
}

// runTurn is one turn of RunTurn. renewed, if not nil, is set when the child's token changes
// while the turn runs.
func (c *Client) runTurn(ctx context.Context, threadID string, input []protocol.UserInput, opts TurnOptions, renewed *atomic.Bool) (*TurnResult, error) {
	grace := opts.InterruptGrace
	if grace <= 0 {
		grace = DefaultInterruptGrace
	}
	log := c.logger().WithLazy(zap.String("thread", threadID))

	t := &turnState{threadID: threadID, onNotif: opts.OnNotification, approve: opts.Approve, callTool: opts.CallTool,
		done: make(chan struct{}), startedCh: make(chan struct{}), started: time.Now(), renewed: renewed}
	// An approval waiting for a person ends with the turn: with RunTurn's ctx (a watchdog, a
	// stop), when RunTurn returns, or when the child fails.
	askCtx, endAsk := context.WithCancelCause(ctx)
	defer endAsk(errTurnOver)
	stopAskOnFailure := context.AfterFunc(c.life, func() { endAsk(context.Cause(c.life)) })
	defer stopAskOnFailure()
	t.askCtx = askCtx
	// Registered before turn/start is sent: codex may send the turn's first notifications before
	// the response that tells us its id.
	if !c.register(t) {
		return nil, fmt.Errorf("run turn on thread %s: %w", threadID, c.Err()) // gone implies failed
	}
	start := time.Now()
	stderrMark := c.proc.Tail().Total()

	// Phase 1: the turn/start response gives the turn id. A turn/start refused as overloaded
	// started nothing (codex drops the request unprocessed), so it is simply sent again.
	// These waits are not bound to the client's life (unlike call): a child may answer,
	// complete the turn and exit at once, and the response must still win over the exit. The
	// monitor closes the connection when the client fails, which ends the wait.
	var started protocol.TurnResult
	var deadline time.Time // set once ctx is done: the end of the grace
	unanswered := false
	params := protocol.TurnStartParams{ThreadID: threadID, Input: input, Model: opts.Model, Effort: opts.Effort}
	err := c.retryOverloaded(ctx, protocol.MethodTurnStart, func() error {
		c.calls.Add(1)
		defer c.calls.Add(-1)
		w, err := c.conn.DispatchCall(context.Background(), protocol.MethodTurnStart, params)
		if err != nil {
			return c.brokenErr(protocol.MethodTurnStart, err)
		}
		err = c.waitUnbound(ctx, protocol.MethodTurnStart, w, &started)
		if err != nil && ctx.Err() != nil {
			// ctx ended before the id was known; the turn may be starting anyway. Wait (bounded)
			// for the id so that the turn can be interrupted rather than left running.
			deadline = time.Now().Add(grace)
			gctx, cancel := context.WithDeadline(context.Background(), deadline)
			err = c.waitUnbound(gctx, protocol.MethodTurnStart, w, &started)
			cancel()
			unanswered = err != nil && gctx.Err() != nil
		}
		return err
	})
	if unanswered {
		c.abandon(t, nil)
		c.setWedged(threadID)
		return nil, fmt.Errorf("run turn on thread %s: %w: codex pid %d did not answer turn/start within %s: %w",
			threadID, ErrWedged, c.pid, grace, context.Cause(ctx))
	}
	if err != nil {
		c.abandon(t, nil)
		var re *jsonrpc2.Error
		if errors.As(err, &re) && re.Code == protocol.CodeInvalidRequest && strings.Contains(re.Message, "thread not found") {
			// Not started or resumed in this process (or unknown to codex altogether).
			return nil, fmt.Errorf("run turn on thread %s: %w: %w", threadID, ErrThreadNotFound, err)
		}
		return nil, fmt.Errorf("run turn on thread %s: %w", threadID, classifyExit(err))
	}
	turnID := started.Turn.ID
	if turnID == "" {
		c.abandon(t, nil)
		return nil, fmt.Errorf("run turn on thread %s: %w: turn/start result of pid %d has no turn id", threadID, ErrProtocol, c.pid)
	}
	log = log.WithLazy(zap.String("turn", turnID))
	log.Debug("turn started")
	if opts.OnStarted != nil {
		opts.OnStarted(turnID)
	}
	// The dispatcher learned the id too, in stream order (see onResponse).
	return c.awaitTurn(ctx, log, t, turnID, start, stderrMark, grace, deadline)
}

// awaitTurn is a turn's phase 2: it waits for turn/completed (or the client's failure, via the
// dispatcher), and interrupts the turn when ctx is done. deadline is the end of the interrupt's
// grace when ctx was done already.
func (c *Client) awaitTurn(ctx context.Context, log *zap.Logger, t *turnState, turnID string, start time.Time, stderrMark int64, grace time.Duration, deadline time.Time) (*TurnResult, error) {
	threadID := t.threadID
	if deadline.IsZero() {
		select {
		case <-t.done:
			return c.turnResult(t, turnID, start, stderrMark, nil)
		case <-ctx.Done():
			deadline = time.Now().Add(grace)
		}
	}
	cause := context.Cause(ctx)
	log.Info("interrupting turn", zap.NamedError("cause", cause))
	stopInterrupt := c.interrupt(log, t, turnID, deadline)
	defer stopInterrupt()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-t.done:
	case <-timer.C:
		if c.abandon(t, errAbandoned) {
			c.setWedged(threadID)
			res, _ := c.turnResult(t, turnID, start, stderrMark, nil)
			log.Warn("turn ignored turn/interrupt", zap.Duration("grace", grace))
			return res, fmt.Errorf("%w: turn %s on thread %s (codex pid %d) did not end within %s of turn/interrupt: %w",
				ErrWedged, turnID, threadID, c.pid, grace, cause)
		}
		// It completed just now after all.
	}
	return c.turnResult(t, turnID, start, stderrMark, cause)
}

// interrupt sends turn/interrupt for turn t from a goroutine, which retries it while codex
// refuses it as overloaded, until deadline; RunTurn meanwhile waits for the turn to end. stop
// ends the goroutine and waits for it.
//
// codex answers turn/start before it registers the turn as active, and refuses an interrupt in
// between with "no active turn to interrupt" (isNoActiveTurn). Such a refusal of a turn whose
// turn/started had not arrived when the interrupt was sent means the turn has yet to start, not
// that it ended: the interrupt is sent again as soon as turn/started arrives. One sent after
// turn/started is not repeated: that turn is ending, and its turn/completed is on the way.
func (c *Client) interrupt(log *zap.Logger, t *turnState, turnID string, deadline time.Time) (stop func()) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	done := make(chan struct{})
	params := protocol.TurnInterruptParams{ThreadID: t.threadID, TurnID: turnID}
	go func() {
		defer close(done)
		for {
			startedBefore := t.hasStarted()
			err := c.retryOverloaded(ctx, protocol.MethodTurnInterrupt, func() error {
				c.calls.Add(1)
				defer c.calls.Add(-1)
				w, err := c.conn.DispatchCall(ctx, protocol.MethodTurnInterrupt, params)
				if err != nil {
					// The stream broke: the client is failing, which ends the turn too.
					return err
				}
				var ack json.RawMessage
				return c.wait(ctx, protocol.MethodTurnInterrupt, w, &ack)
			})
			if err == nil || ctx.Err() != nil {
				return
			}
			if !isNoActiveTurn(err) || startedBefore {
				// Nothing more to do: the grace decides.
				log.Info("turn/interrupt failed", zap.Error(err))
				return
			}
			log.Info("codex has not registered the turn yet; interrupting again once it starts", zap.Error(err))
			select {
			case <-t.startedCh:
			case <-t.done:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// errAbandoned marks a turn RunTurn gave up on.
var errAbandoned = errors.New("turn abandoned")

// turnResult builds the result of a finished turn. cause is the context cause when the turn was
// interrupted by us.
func (c *Client) turnResult(t *turnState, turnID string, start time.Time, stderrMark int64, cause error) (*TurnResult, error) {
	t.mu.Lock()
	notifs, final, terr, refreshErr := t.notifs, t.final, t.err, t.refreshErr
	t.mu.Unlock()
	r := &TurnResult{ThreadID: t.threadID, TurnID: turnID, Notifications: notifs, Duration: time.Since(start)}
	if final != nil {
		r.Status, r.Error = final.Turn.Status, final.Turn.Error
	}

	switch {
	case terr != nil && !errors.Is(terr, errAbandoned):
		err := fmt.Errorf("turn %s on thread %s: %w", turnID, t.threadID, classifyExit(terr))
		if cause != nil {
			err = fmt.Errorf("%w (while interrupting: %w)", err, cause)
		}
		return r, err
	case r.Status == protocol.TurnFailed && refreshErr != nil:
		// The daemon could not give the child a new token: that, not codex's "unauthorized",
		// is what the user should hear.
		return r, &TokenRefreshError{PID: c.pid, Err: refreshErr}
	case r.Status == protocol.TurnFailed:
		if msg := authMessage(r.Error, c.proc.Tail().Since(stderrMark)); msg != "" {
			return r, &AuthError{Msg: msg}
		}
	}
	if cause != nil && r.Status != protocol.TurnCompleted {
		return r, fmt.Errorf("turn %s on thread %s (codex pid %d) ended %s: %w", turnID, t.threadID, c.pid, orUnknown(r.Status), cause)
	}
	return r, nil
}

func orUnknown(status string) string {
	if status == "" {
		return "without turn/completed"
	}
	return status
}

// abandon unregisters t and finishes it with err; it reports false when t had already
// finished (the dispatcher completed it first).
func (c *Client) abandon(t *turnState, err error) bool {
	c.unregister(t)
	if err == nil {
		err = errAbandoned
	}
	return t.finish(nil, err)
}

// turnState is one RunTurn as seen by the dispatcher.
type turnState struct {
	threadID string
	onNotif  func(protocol.Notification)
	approve  Approver
	callTool ToolHandler
	compact  bool            // a compaction (CompactThread): its id comes with turn/started
	askCtx   context.Context // the Approver's and the ToolHandler's: ends with the turn
	done     chan struct{}   // closed by finish
	// startedCh is closed when the turn's turn/started arrived: codex has registered the turn
	// and takes turn/interrupt for it (see Client.interrupt).
	startedCh chan struct{}

	// Owned by the dispatcher goroutine.
	id      string                                 // empty until the turn/start response was routed
	pending []pendingNotif                         // this thread's notifications that arrived before the id was known
	files   map[string][]protocol.FileUpdateChange // fileChange item id → its changes (noteFileChange)

	mu sync.Mutex // guards the fields below and serialises onNotif with finish
	// adopted marks a turn a previous image handed over: until ResumeTurn attaches the
	// options, its approval requests wait in deferred instead of being declined.
	adopted  bool
	deferred []*jsonrpc2.Request
	// started is when the turn was started (by this image or an earlier one).
	started time.Time
	// handedID is id, readable outside the dispatcher.
	handedID string
	notifs   []protocol.Notification
	final    *protocol.TurnNotification
	err      error
	ended    bool
	// refreshErr is why the daemon could not answer the turn's token refresh request.
	refreshErr error
	// renewed is set when the child's token changed while the turn ran (RunTurn's); nil for
	// turns that are not run again.
	renewed *atomic.Bool
}

func (t *turnState) setRefreshErr(err error) {
	t.mu.Lock()
	t.refreshErr = err
	t.mu.Unlock()
}

type pendingNotif struct {
	n      protocol.Notification
	turnID string
}

// hasStarted reports whether the turn's turn/started arrived.
func (t *turnState) hasStarted() bool {
	select {
	case <-t.startedCh:
		return true
	default:
		return false
	}
}

// add records n and hands it to the caller's callback, unless the turn already ended.
func (t *turnState) add(n protocol.Notification) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended {
		return
	}
	t.notifs = append(t.notifs, n)
	if t.onNotif != nil {
		t.onNotif(n)
	}
}

// finish ends the turn once; it reports whether this call ended it.
func (t *turnState) finish(final *protocol.TurnNotification, err error) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended {
		return false
	}
	t.ended, t.final, t.err = true, final, err
	close(t.done)
	return true
}

// dispatcher delivers inbound messages in arrival order. When the queue closes (the client
// failed or is closing) it fails the running turn, after everything that arrived before.
func (c *Client) dispatcher() {
	defer c.wg.Done()
	for {
		it, ok := c.queue.pop()
		if !ok {
			break
		}
		switch it.kind {
		case inNotification:
			c.route(it.notif)
		case inRequest:
			c.answer(it.req)
		case inTurnID:
			c.setTurnID(it.threadID, it.turnID)
		case inHold:
			c.holdDispatcher(it.hold)
		}
	}
	c.mu.Lock()
	ts := c.turns
	c.turns, c.gone = map[string]*turnState{}, true
	for id, ch := range c.unloading {
		close(ch) // the child is gone, and the thread with it
		delete(c.unloading, id)
	}
	c.mu.Unlock()
	for _, t := range ts {
		t.finish(nil, c.Err())
	}
}

// routing holds the fields that say which thread and turn a notification belongs to.
type routing struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
	Turn     *struct {
		ID string `json:"id"`
	} `json:"turn"`
}

// routeOfDecode is routeOf by a full decode: the answer routeOfFast must match.
func routeOfDecode(params json.RawMessage) (threadID, turnID string) {
	var r routing
	if len(params) == 0 || json.Unmarshal(params, &r) != nil {
		return "", ""
	}
	turnID = r.TurnID
	if turnID == "" && r.Turn != nil {
		turnID = r.Turn.ID
	}
	return r.ThreadID, turnID
}

// route hands a notification to the running turn of its thread if it belongs to it: the same
// turn or no turn at all (thread-level notifications such as thread/status/changed).
// Notifications of threads without a running turn, and of other turns, are dropped; a
// thread/closed ends an UnloadThread's wait.
func (c *Client) route(n protocol.Notification) {
	threadID, turnID := routeOf(n.Params)
	if n.Method == protocol.NotifyThreadClosed {
		c.threadClosed(threadID)
		return
	}
	if threadID == "" && n.Method == protocol.NotifyRateLimitsUpdated {
		// Process-wide, but sent for the model answer of a running turn: the turn's
		// usage-limit failure is read from it. The limits are the account's, so every running
		// turn may read them.
		for _, t := range c.runningTurns() {
			c.routeTo(t, n, turnID)
		}
		return
	}
	if t := c.turnOf(threadID); t != nil && threadID != "" {
		c.routeTo(t, n, turnID)
	}
}

// routeTo hands n to t, held until t's id is known.
func (c *Client) routeTo(t *turnState, n protocol.Notification, turnID string) {
	if t.id == "" && t.compact && n.Method == protocol.NotifyTurnStarted && turnID != "" {
		c.setTurnID(t.threadID, turnID) // a compaction's id comes with its turn/started (compact.go)
	}
	if t.id == "" {
		t.pending = append(t.pending, pendingNotif{n: n, turnID: turnID})
		return
	}
	c.deliver(t, n, turnID)
}

func (c *Client) deliver(t *turnState, n protocol.Notification, turnID string) {
	if turnID != "" && turnID != t.id {
		return
	}
	t.noteFileChange(n)
	t.add(n)
	if n.Method == protocol.NotifyTurnStarted && turnID == t.id && !t.hasStarted() {
		close(t.startedCh) // only the dispatcher closes it
	}
	if n.Method == protocol.NotifyTurnCompleted && turnID == t.id {
		// Fields of unexpected types are skipped and logged: only a missing status makes the
		// turn's outcome unknown, which is an error rather than a result without status.
		var tn protocol.TurnNotification
		var terr error
		if err := json.Unmarshal(n.Params, &tn); err != nil {
			c.logger().Warn("undecodable turn/completed", zap.Error(err))
		}
		if tn.Turn.Status == "" {
			terr = fmt.Errorf("%w: codex pid %d sent turn/completed without a status (status must be a string): %s",
				ErrProtocol, c.pid, clip(n.Params, 200))
		}
		c.unregister(t)
		t.finish(&tn, terr)
	}
}

// onResponse runs on jsonrpc2's reader for every response, before the caller sees it. The
// response to turn/start carries the turn id; it is queued in stream order, so that the
// dispatcher knows the id before it routes anything that came after the response. Learning it
// from RunTurn instead would race: a child can complete the turn and exit before RunTurn's
// goroutine gets to run.
func (c *Client) onResponse(req *jsonrpc2.Request, resp *jsonrpc2.Response) {
	if req == nil || resp == nil || req.Method != protocol.MethodTurnStart || resp.Error != nil ||
		resp.Result == nil || req.Params == nil {
		return
	}
	var res protocol.TurnResult
	var params protocol.TurnStartParams
	// As in responseErr, fields of unexpected types do not matter as long as the id decodes.
	_ = json.Unmarshal(*resp.Result, &res)
	if json.Unmarshal(*req.Params, &params) != nil || res.Turn.ID == "" {
		return
	}
	c.queue.push(inbound{kind: inTurnID, threadID: params.ThreadID, turnID: res.Turn.ID})
}

// setTurnID records the id of the running turn and flushes what arrived before it.
func (c *Client) setTurnID(threadID, id string) {
	t := c.turnOf(threadID)
	if t == nil || t.id != "" {
		return // the turn was abandoned meanwhile
	}
	t.id = id
	t.mu.Lock()
	t.handedID = id
	t.mu.Unlock()
	pending := t.pending
	t.pending = nil
	for _, p := range pending {
		c.deliver(t, p.n, p.turnID)
	}
}

// answer replies to a server-initiated request according to the policy. It runs on the
// dispatcher, never on jsonrpc2's reader: the reply is a write that may wait on the child.
func (c *Client) answer(req *jsonrpc2.Request) {
	log := c.logger().With(zap.String("method", req.Method), zap.Stringer("id", req.ID))
	if req.Method == protocol.RequestChatGPTTokensRefresh && c.cfg.Tokens != nil {
		c.answerTokenRefresh(req, log)
		return
	}
	if req.Method == protocol.RequestDynamicToolCall && len(c.cfg.DynamicTools) > 0 {
		c.callTool(req, log)
		return
	}
	if c.cfg.Policy.asks(req.Method) && c.ask(req, log) {
		return
	}
	result, rpcErr := c.cfg.Policy.answer(req.Method, req.Params)
	var err error
	if rpcErr != nil {
		log.Warn("unsupported server request answered with an error", zap.Int64("code", rpcErr.Code))
		err = c.conn.ReplyWithError(context.Background(), req.ID, rpcErr)
	} else {
		log.Info("server request answered by policy", zap.Any("answer", result))
		err = c.conn.Reply(context.Background(), req.ID, result)
	}
	if err != nil {
		log.Debug("reply to server request", zap.Error(err))
	}
}
