package appserver

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/sourcegraph/jsonrpc2"
	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// A child whose turn runs is handed over too: PauseRunning holds it at a message boundary with
// every message read so far dispatched to the turn, and no request of ours unanswered; the turn
// (TurnHandover) travels with the child, and the next image's client goes on routing the
// turn's notifications to it (Adopt) until ResumeTurn returns its result. codex does not know:
// it goes on writing the turn's notifications to the same pipe.

// pauseRunningBound bounds the wait for a running turn's requests to be answered (turn/start
// and turn/interrupt are answered at once) before the pause gives up.
const pauseRunningBound = 5 * time.Second

// PendingRequest is a server request waiting for our answer: an approval a person has not
// given yet.
type PendingRequest struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params,omitempty"`
}

// TurnHandover is a running turn as the next image needs it.
type TurnHandover struct {
	ThreadID string    `json:"thread_id"`
	TurnID   string    `json:"turn_id"`
	Started  time.Time `json:"started"`
	// TurnStarted says turn/started arrived: turn/interrupt is taken for the turn.
	TurnStarted bool `json:"turn_started"`
	// Notifications are the turn's notifications so far: the reply and usage are built from
	// them at the end.
	Notifications []protocol.Notification `json:"notifications,omitempty"`
	// Files are the changes of the turn's fileChange items, by item id, for their approvals.
	Files map[string][]protocol.FileUpdateChange `json:"files,omitempty"`
	// Asks are the approval requests waiting for a person.
	Asks []PendingRequest `json:"asks,omitempty"`
}

// runningHold is the pause of a client whose turn runs.
type runningHold struct {
	reached chan struct{} // closed by the dispatcher once it holds
	resume  chan struct{}
	gate    bool // the write gate (the stream's write lock) is held
}

func (c *Client) trackAsk(req *jsonrpc2.Request) {
	pr := PendingRequest{Method: req.Method}
	pr.ID, _ = json.Marshal(req.ID)
	if req.Params != nil {
		pr.Params = *req.Params
	}
	c.asksMu.Lock()
	if c.asks == nil {
		c.asks = make(map[string]PendingRequest)
	}
	c.asks[req.ID.String()] = pr
	c.asksMu.Unlock()
}

func (c *Client) untrackAsk(req *jsonrpc2.Request) {
	c.asksMu.Lock()
	delete(c.asks, req.ID.String())
	c.asksMu.Unlock()
}

// PauseRunning is Pause for a client whose turn runs: the handover's Turn holds the turn. It
// waits (up to ctx, at most pauseRunningBound) until the turn's id is known and none of our
// requests is unanswered; then the reader is held at a message boundary, every message read is
// dispatched, and writes wait (an approval's answer, an interrupt) until Resume. A client whose
// turn ended meanwhile is paused as an idle one. Turns running on several threads (a child
// several chats share) are all handed over, in Handover.Turns.
func (c *Client) PauseRunning(ctx context.Context) (Handover, error) {
	if !c.Running() {
		return c.Pause(ctx)
	}
	se, ok := c.proc.(interface{ Stderr() *os.File })
	if !ok {
		return Handover{}, fmt.Errorf("codex pid %d: %w", c.pid, ErrNoHandover)
	}
	ctx, cancel := context.WithTimeout(ctx, pauseRunningBound)
	defer cancel()
	for {
		if err := c.Err(); err != nil {
			return Handover{}, fmt.Errorf("codex pid %d: %w", c.pid, err)
		}
		if !c.Running() {
			return c.Pause(ctx)
		}
		if c.calls.Load() == 0 && c.idsKnown() {
			h, again, err := c.holdRunning(ctx)
			if err != nil {
				return Handover{}, err
			}
			if !again {
				h.Stderr = se.Stderr()
				return h, nil
			}
		}
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return Handover{}, fmt.Errorf("codex pid %d: a request of the running turn is unanswered: %w", c.pid, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// idsKnown reports whether a turn runs and the dispatcher knows the id of every running turn.
func (c *Client) idsKnown() bool {
	ts := c.runningTurns()
	for _, t := range ts {
		t.mu.Lock()
		id := t.handedID
		t.mu.Unlock()
		if id == "" {
			return false
		}
	}
	return len(ts) > 0
}

// holdRunning holds the reader, the dispatcher and the writes, and describes the turn. again
// means a request was sent meanwhile: everything was let go, and the caller tries later.
func (c *Client) holdRunning(ctx context.Context) (h Handover, again bool, err error) {
	pending, err := c.stream.pause(ctx)
	if err != nil {
		return Handover{}, false, fmt.Errorf("codex pid %d: pause reading: %w", c.pid, err)
	}
	hold := &runningHold{reached: make(chan struct{}), resume: make(chan struct{})}
	if !c.queue.push(inbound{kind: inHold, hold: hold}) {
		c.stream.resume()
		return Handover{}, false, fmt.Errorf("codex pid %d: %w", c.pid, c.Err())
	}
	select {
	case <-hold.reached:
	case <-ctx.Done():
		// The dispatcher is stuck on a write to a child that does not read: give up.
		close(hold.resume)
		c.stream.resume()
		return Handover{}, false, fmt.Errorf("codex pid %d: dispatching what was read: %w", c.pid, context.Cause(ctx))
	}
	c.stream.wmu.Lock()
	hold.gate = true
	c.pauseMu.Lock()
	c.held = hold
	c.thawed = make(chan struct{})
	c.pauseMu.Unlock()
	ts := c.runningTurns()
	if c.calls.Load() != 0 || len(ts) == 0 || len(ts) != c.Threads() {
		// A request went out meanwhile, or a turn is being started or ended.
		c.Resume()
		return Handover{}, true, nil
	}
	byThread := make(map[string]*TurnHandover, len(ts))
	var ths []*TurnHandover
	for _, t := range ts {
		th := t.handover()
		byThread[th.ThreadID] = &th
		ths = append(ths, &th)
	}
	c.asksMu.Lock()
	for _, a := range c.asks {
		th := ths[0]
		if len(ths) > 1 {
			// Each approval belongs to the turn of the thread it names.
			var p struct {
				ThreadID string `json:"threadId"`
			}
			_ = json.Unmarshal(a.Params, &p)
			if byThread[p.ThreadID] == nil {
				continue
			}
			th = byThread[p.ThreadID]
		}
		th.Asks = append(th.Asks, a)
	}
	c.asksMu.Unlock()
	h = Handover{PID: c.pid, Stdin: c.proc.Stdin(), Stdout: c.proc.Stdout(), Pending: pending}
	if len(ths) == 1 {
		h.Turn = ths[0]
	} else {
		h.Turns = ths
	}
	return h, false, nil
}

// handover describes t; it runs while the dispatcher holds.
func (t *turnState) handover() TurnHandover {
	t.mu.Lock()
	defer t.mu.Unlock()
	th := TurnHandover{ThreadID: t.threadID, TurnID: t.id, Started: t.started, TurnStarted: t.hasStarted(),
		Notifications: append([]protocol.Notification(nil), t.notifs...)}
	if len(t.files) > 0 {
		th.Files = t.files
	}
	// Approvals of a turn adopted from an earlier image and not asked again yet.
	for _, req := range t.deferred {
		pr := PendingRequest{Method: req.Method}
		pr.ID, _ = json.Marshal(req.ID)
		if req.Params != nil {
			pr.Params = *req.Params
		}
		th.Asks = append(th.Asks, pr)
	}
	return th
}

// holdDispatcher runs on the dispatcher for an inHold item: everything read before the pause
// has been dispatched.
func (c *Client) holdDispatcher(h *runningHold) {
	close(h.reached)
	<-h.resume
}

// resumeRunning lets a running hold go (Resume).
func (c *Client) resumeRunning(h *runningHold) {
	if h.gate {
		c.stream.wmu.Unlock()
	}
	close(h.resume)
}

// installTurn registers the turn a previous image handed over as the client's running turn,
// before the dispatcher starts: the turn's next notifications are routed to it.
func (c *Client) installTurn(th *TurnHandover) {
	t := &turnState{threadID: th.ThreadID, id: th.TurnID, handedID: th.TurnID, adopted: true, started: th.Started,
		notifs: th.Notifications, files: th.Files, done: make(chan struct{}), startedCh: make(chan struct{})}
	if th.TurnStarted {
		close(t.startedCh)
	}
	for _, a := range th.Asks {
		req := &jsonrpc2.Request{Method: a.Method}
		if json.Unmarshal(a.ID, &req.ID) != nil {
			continue
		}
		if len(a.Params) > 0 {
			p := a.Params
			req.Params = &p
		}
		t.deferred = append(t.deferred, req)
	}
	c.gate.enterNow()
	c.mu.Lock()
	c.busy[t.threadID] = true
	c.turns[t.threadID] = t
	if c.adopted == nil {
		c.adopted = make(map[string]*turnState)
	}
	c.adopted[t.threadID] = t
	c.mu.Unlock()
}

// ResumeTurn goes on with the turn a previous image handed over with the child (Adopt), as
// RunTurn would have: opts' callbacks get the notifications from now on, its Approve the
// approvals still waiting (asked again) and new ones, and ctx's end interrupts the turn. It
// fails with ErrTurnInProgress when the client has no handed-over turn (or it was taken).
func (c *Client) ResumeTurn(ctx context.Context, opts TurnOptions) (*TurnResult, error) {
	c.mu.Lock()
	thread := ""
	if len(c.adopted) == 1 {
		for id := range c.adopted {
			thread = id
		}
	}
	c.mu.Unlock()
	return c.ResumeThreadTurn(ctx, thread, opts)
}

// ResumeThreadTurn is ResumeTurn for the handed-over turn of threadID, in a child whose
// threads' turns crossed together.
func (c *Client) ResumeThreadTurn(ctx context.Context, threadID string, opts TurnOptions) (*TurnResult, error) {
	c.mu.Lock()
	t := c.adopted[threadID]
	delete(c.adopted, threadID)
	c.mu.Unlock()
	if t == nil {
		return nil, fmt.Errorf("resume turn on codex pid %d: no handed-over turn: %w", c.pid, ErrTurnInProgress)
	}
	defer func() {
		c.gate.leave()
		c.mu.Lock()
		delete(c.busy, t.threadID)
		c.mu.Unlock()
		c.kickTokens()
	}()
	grace := opts.InterruptGrace
	if grace <= 0 {
		grace = DefaultInterruptGrace
	}
	askCtx, endAsk := context.WithCancelCause(ctx)
	defer endAsk(errTurnOver)
	stopAskOnFailure := context.AfterFunc(c.life, func() { endAsk(context.Cause(c.life)) })
	defer stopAskOnFailure()
	log := c.logger().With(zap.String("thread", t.threadID), zap.String("turn", t.id))
	t.mu.Lock()
	t.onNotif, t.approve, t.callTool, t.askCtx = opts.OnNotification, opts.Approve, opts.CallTool, askCtx
	deferred := t.deferred
	t.deferred, t.adopted = nil, false
	sofar := len(t.notifs)
	t.mu.Unlock()
	for _, req := range deferred {
		// Asked on the dispatcher, which owns the turn's file changes, as if just received.
		c.queue.push(inbound{kind: inRequest, req: req})
	}
	log.Info("turn handed over by the previous image goes on", zap.Int("notifications", sofar), zap.Int("approvals", len(deferred)))
	return c.awaitTurn(ctx, log, t, t.id, t.started, c.proc.Tail().Total(), grace, time.Time{})
}
