package appserver

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// Several chats' threads may live in one child: turns, their notifications, approvals and tool
// calls are routed by thread id, and "busy" and "wedged" are states of a thread. What stays the
// child's own is its life (Done, Err), its login and its pause for a reload.

// claim marks threadID busy for a turn (what names it in the error): a second turn on the same
// thread is refused with ErrTurnInProgress, since codex would merge it into the first. release
// frees the thread and wakes a token push waiting for the child's turns to end.
func (c *Client) claim(what, threadID string) (release func(), err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.busy[threadID] {
		return nil, fmt.Errorf("%s on thread %s: %w (codex pid %d)", what, threadID, ErrTurnInProgress, c.pid)
	}
	c.busy[threadID] = true
	return func() {
		c.mu.Lock()
		delete(c.busy, threadID)
		c.mu.Unlock()
		// A token handed over while a model request is in flight makes codex fail that
		// request: a push waits for the turns' end, and this may be it.
		c.kickTokens()
	}, nil
}

// setWedged records that threadID's turn ignored turn/interrupt.
func (c *Client) setWedged(threadID string) {
	c.mu.Lock()
	c.wedged[threadID] = true
	c.mu.Unlock()
}

// threadWedged reports whether threadID's turn ignored turn/interrupt.
func (c *Client) threadWedged(threadID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wedged[threadID]
}

// Wedged reports whether a turn of the child ignored turn/interrupt. codex still runs it: the
// thread takes no more turns and cannot be unloaded, so it leaves the child only when the
// child ends. Turns of the child's other threads still run.
func (c *Client) Wedged() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.wedged) > 0
}

// WedgedThread reports whether threadID's turn ignored turn/interrupt: codex never unloads it.
func (c *Client) WedgedThread(threadID string) bool { return c.threadWedged(threadID) }

// Running reports whether a turn (or a compaction) runs on any thread of the client.
func (c *Client) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.busy) > 0
}

// Threads is the number of threads a turn or a compaction runs on.
func (c *Client) Threads() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.busy)
}

// register makes t the turn its thread's notifications are routed to; false when the
// dispatcher has exited.
func (c *Client) register(t *turnState) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone {
		return false
	}
	c.turns[t.threadID] = t
	return true
}

// unregister removes t, if it is still its thread's turn.
func (c *Client) unregister(t *turnState) {
	c.mu.Lock()
	if c.turns[t.threadID] == t {
		delete(c.turns, t.threadID)
	}
	c.mu.Unlock()
}

// turnOf is threadID's running turn, nil when none.
func (c *Client) turnOf(threadID string) *turnState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.turns[threadID]
}

// runningTurns are the turns registered now, in no order.
func (c *Client) runningTurns() []*turnState {
	c.mu.Lock()
	defer c.mu.Unlock()
	ts := make([]*turnState, 0, len(c.turns))
	for _, t := range c.turns {
		ts = append(ts, t)
	}
	return ts
}

// markRenewed tells every running turn that the child's token changed under it: a turn that
// then fails before the model answered is run again once (RunTurn).
func (c *Client) markRenewed() {
	for _, t := range c.runningTurns() {
		if t.renewed != nil {
			t.renewed.Store(true)
		}
	}
}

// UnloadThread lets threadID go from the child (thread/unsubscribe) and waits until codex has
// unloaded it (thread/closed), so that another child may resume it: a thread has one writer,
// and a second process's thread/resume fails while the first still holds it. codex unloads an
// unsubscribed thread once it has been idle for thread_unload_delay_secs (Config's
// ConfigOverrides; the pool sets 0). ctx bounds the wait; a thread with a turn running is
// refused with ErrTurnInProgress, since codex would not unload it before the turn ends.
func (c *Client) UnloadThread(ctx context.Context, threadID string) error {
	ch := make(chan struct{})
	c.mu.Lock()
	if c.busy[threadID] {
		c.mu.Unlock()
		return fmt.Errorf("unload thread %s: %w (codex pid %d)", threadID, ErrTurnInProgress, c.pid)
	}
	c.unloading[threadID] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		if c.unloading[threadID] == ch {
			delete(c.unloading, threadID)
		}
		c.mu.Unlock()
	}()
	var res protocol.ThreadUnsubscribeResult
	if err := c.call(ctx, protocol.MethodThreadUnsubscribe, protocol.ThreadIDParams{ThreadID: threadID}, &res); err != nil {
		return fmt.Errorf("unload thread %s: %w", threadID, err)
	}
	if res.Status == protocol.UnsubscribeNotLoaded {
		return nil
	}
	bctx, cancel := c.bind(ctx)
	defer cancel()
	select {
	case <-ch:
		c.logger().Debug("thread unloaded", zap.String("thread", threadID), zap.String("unsubscribe", res.Status))
		return nil
	case <-bctx.Done():
		return fmt.Errorf("unload thread %s on codex pid %d (unsubscribe: %s): no thread/closed: %w",
			threadID, c.pid, res.Status, context.Cause(bctx))
	}
}

// threadClosed ends an UnloadThread's wait for threadID; it runs on the dispatcher.
func (c *Client) threadClosed(threadID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch := c.unloading[threadID]; ch != nil {
		close(ch)
		delete(c.unloading, threadID)
	}
}
