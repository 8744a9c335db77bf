package appserver

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// A thread's persisted history, as codex 0.169.0 exposes it (verified against the real binary;
// see docs/PROTOCOL.md, "Re-running a message after a crash"):
//
//   - A turn whose process died mid-turn stays in the rollout with its user message; after
//     thread/resume in a new process it reads as status "interrupted" (completedAt null), and a
//     turn/start with the same text would make the model see the message twice.
//   - thread/turns/list {threadId, limit: 1, sortDirection: "desc"} returns {data: [turn]}, the
//     newest turn: id, status, and in the default "summary" item view its userMessage and
//     agentMessage items (tool items are left out). An empty thread gives data: [].
//   - thread/revert {threadId, beforeTurnId} works on the ordinary threads codex 0.169.0 creates
//     (thread.historyMode is "paginated"), in the process that resumed the thread. It answers
//     {thread} with thread.turns empty and thread.path a new rollout file (the old file is kept);
//     the thread id stays the same, and a later thread/resume in yet another process sees the
//     reverted history. It sends thread/status/changed notLoaded, then idle, then
//     thread/reverted {threadId}. An unknown turn is -32600 "turn not found: <id>", an unknown
//     thread -32600 "thread not found: <id>".

// StoredTurn is one turn of a thread's persisted history.
type StoredTurn struct {
	ID string
	// Status is protocol.TurnCompleted, TurnInterrupted, TurnFailed or TurnInProgress. A turn
	// whose process was killed before it ended reads as interrupted once the thread is resumed.
	Status string
	// UserTexts are the texts of the turn's user messages, in order (one per turn/start).
	UserTexts []string
}

// LastTurn returns the newest turn of the thread's persisted history, with thread/turns/list.
// ok is false when the thread has no turn yet.
func (c *Client) LastTurn(ctx context.Context, threadID string) (turn StoredTurn, ok bool, err error) {
	var res protocol.ThreadTurnsResult
	err = c.call(ctx, protocol.MethodThreadTurns, protocol.ThreadTurnsParams{
		ThreadID: threadID, Limit: 1, SortDirection: protocol.SortDesc,
	}, &res)
	if err != nil {
		return StoredTurn{}, false, fmt.Errorf("last turn of thread %s: %w", threadID, err)
	}
	if len(res.Data) == 0 {
		return StoredTurn{}, false, nil
	}
	t := res.Data[0]
	if t.ID == "" {
		return StoredTurn{}, false, fmt.Errorf("last turn of thread %s on codex pid %d: %w: turn without id", threadID, c.pid, ErrProtocol)
	}
	turn = StoredTurn{ID: t.ID, Status: t.Status}
	for _, raw := range t.Items {
		it, err := protocol.DecodeItem(raw)
		if err != nil || it.Type != protocol.ItemUserMessage {
			continue
		}
		var text strings.Builder
		for _, part := range it.Content {
			if part.Type == "text" {
				text.WriteString(part.Text)
			}
		}
		turn.UserTexts = append(turn.UserTexts, text.String())
	}
	return turn, true, nil
}

// Waits of RevertThread while codex still holds the thread's writer: the first, the longest,
// and the most in all (a writer held that long is another process's, which will not let go).
const (
	revertBusyFirstWait = 10 * time.Millisecond
	revertBusyMaxWait   = 320 * time.Millisecond
	revertBusyMaxTotal  = 5 * time.Second
)

// RevertThread drops turn beforeTurnID and every later turn from the thread's persisted history,
// with thread/revert: the model no longer sees them. Files those turns changed stay changed. The
// thread must be loaded in this process and idle.
//
// Right after a turn's turn/completed, codex may still hold the thread's writer for that turn
// and refuse the revert ("already has an active writer"; seen under load on codex 0.171, 30 ms
// after a turn that failed at once). codex tells nobody when it lets go, so the revert is sent
// again after a wait, the waits doubling from revertBusyFirstWait to revertBusyMaxWait, for at
// most revertBusyMaxTotal and while ctx lasts.
func (c *Client) RevertThread(ctx context.Context, threadID, beforeTurnID string) error {
	var res protocol.ThreadResult
	params := protocol.ThreadRevertParams{ThreadID: threadID, BeforeTurnID: beforeTurnID}
	err := c.call(ctx, protocol.MethodThreadRevert, params, &res)
	wait, waited := revertBusyFirstWait, time.Duration(0)
	for refusals := 1; isActiveWriter(err); refusals++ {
		if waited+wait > revertBusyMaxTotal {
			return fmt.Errorf("revert thread %s before turn %s on codex pid %d: refused %d times in %s: %w",
				threadID, beforeTurnID, c.pid, refusals, waited, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("revert thread %s before turn %s on codex pid %d: refused %d times: %w (and %w)",
				threadID, beforeTurnID, c.pid, refusals, err, context.Cause(ctx))
		case <-t.C:
		}
		waited += wait
		wait = min(2*wait, revertBusyMaxWait)
		err = c.call(ctx, protocol.MethodThreadRevert, params, &res)
	}
	if err != nil {
		return fmt.Errorf("revert thread %s before turn %s: %w", threadID, beforeTurnID, err)
	}
	c.logger().Debug("thread reverted", zap.String("thread", threadID), zap.String("before_turn", beforeTurnID),
		zap.String("rollout", res.Thread.Path))
	return nil
}
