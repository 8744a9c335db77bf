package appserver

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// CompactThread compacts threadID's history with codex's own thread/compact/start and returns
// once the compaction, which codex runs as a turn of the thread, has completed. codex asks the
// model for a summary of the conversation; the thread's later turns send the model that summary
// and the recent user messages instead of every earlier item.
//
// It takes the thread's turn slot like RunTurn (ErrTurnInProgress while a turn of the thread runs): a turn
// started during a compaction would be merged into it. When ctx ends first the compaction is
// interrupted as a turn is. A compaction codex ran but failed is a result with Status
// TurnFailed, not an error.
func (c *Client) CompactThread(ctx context.Context, threadID string) (*TurnResult, error) {
	release, err := c.claim("compact thread", threadID)
	if err != nil {
		return nil, err
	}
	defer release()
	if err := c.gate.enter(ctx); err != nil {
		return nil, fmt.Errorf("compact thread %s: waiting for a token push to codex pid %d: %w", threadID, c.pid, err)
	}
	defer c.gate.leave()
	if c.threadWedged(threadID) {
		return nil, fmt.Errorf("compact thread %s: %w: codex pid %d still has a turn that was not interrupted", threadID, ErrWedged, c.pid)
	}
	if err := c.Err(); err != nil {
		return nil, fmt.Errorf("compact thread %s: %w", threadID, err)
	}
	log := c.logger().With(zap.String("thread", threadID))
	// The compaction's turn id comes with its turn/started (the response carries none): the
	// dispatcher takes it from there (route), holding what came before.
	t := &turnState{threadID: threadID, compact: true, askCtx: ctx, done: make(chan struct{}), startedCh: make(chan struct{}), started: time.Now()}
	if !c.register(t) {
		return nil, fmt.Errorf("compact thread %s: %w", threadID, c.Err())
	}
	start := time.Now()
	stderrMark := c.proc.Tail().Total()
	var ack json.RawMessage
	if err := c.call(ctx, protocol.MethodThreadCompactStart, protocol.ThreadIDParams{ThreadID: threadID}, &ack); err != nil {
		c.abandon(t, nil)
		return nil, fmt.Errorf("compact thread %s: %w", threadID, classifyExit(err))
	}
	// Until turn/started names the turn, a ctx that ends cannot interrupt it: wait for it within
	// the interrupt grace, as RunTurn waits for turn/start's answer.
	select {
	case <-t.startedCh:
	case <-t.done:
	case <-ctx.Done():
		timer := time.NewTimer(DefaultInterruptGrace)
		defer timer.Stop()
		select {
		case <-t.startedCh:
		case <-t.done:
		case <-timer.C:
			c.abandon(t, nil)
			c.setWedged(threadID)
			return nil, fmt.Errorf("compact thread %s: %w: codex pid %d did not start the compaction within %s: %w",
				threadID, ErrWedged, c.pid, DefaultInterruptGrace, context.Cause(ctx))
		}
	}
	t.mu.Lock()
	turnID := t.handedID
	t.mu.Unlock()
	log.Debug("compaction started", zap.String("turn", turnID))
	return c.awaitTurn(ctx, log.With(zap.String("turn", turnID)), t, turnID, start, stderrMark, DefaultInterruptGrace, time.Time{})
}
