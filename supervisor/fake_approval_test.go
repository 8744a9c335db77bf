package supervisor

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/appserver/appservertest"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// askTurn plays a turn that waits on a person, as codex does (testdata/codex-wire/
// approval-declined.jsonl): a tool completes, the thread turns waitingOnApproval, the command's
// item starts, and the approval goes to opts.Approve. The reply is "decision: <decision>".
//
//	ask             the above
//	ask-late        work a minute first, then the above, then hang (honouring the interrupt)
//	ask-input:<g>   waitingOnUserInput until gate g opens, without calling Approve
func (c *fakeChild) askTurn(ctx context.Context, threadID, turnID, text string, opts appserver.TurnOptions,
	result func(string) *appserver.TurnResult) (*appserver.TurnResult, error) {
	notify := func(method string, params any) {
		b, _ := json.Marshal(params)
		opts.OnNotification(protocol.Notification{Method: method, Params: b})
	}
	status := func(flags ...string) {
		notify(protocol.NotifyThreadStatus, map[string]any{"threadId": threadID,
			"status": map[string]any{"type": "active", "activeFlags": append([]string{}, flags...)}})
	}
	item := func(method, id, st string) {
		notify(method, map[string]any{"threadId": threadID, "turnId": turnID,
			"item": map[string]any{"type": protocol.ItemCommandExecution, "id": id, "command": "make test", "status": st}})
	}
	interrupted := func() (*appserver.TurnResult, error) {
		return result(protocol.TurnInterrupted), fmt.Errorf("turn %s interrupted: %w", turnID, context.Cause(ctx))
	}
	if text == "ask-late" {
		select {
		case <-time.After(time.Minute):
		case <-ctx.Done():
			return interrupted()
		}
	}
	// A tool completes: the post-tool watch is armed from here.
	item(protocol.NotifyItemStarted, "call-0", "inProgress")
	item(protocol.NotifyItemCompleted, "call-0", "completed")
	if gate, ok := strings.CutPrefix(text, "ask-input:"); ok {
		status(protocol.FlagWaitingOnUserInput)
		select {
		case <-c.w.gate(gate):
		case <-ctx.Done():
			return interrupted()
		}
		status()
		return result(protocol.TurnCompleted), nil
	}
	status(protocol.FlagWaitingOnApproval)
	item(protocol.NotifyItemStarted, "call-1", "inProgress")
	decision, err := opts.Approve(ctx, appserver.ApprovalRequest{Kind: appserver.ApprovalCommand, ThreadID: threadID,
		TurnID: turnID, ItemID: "call-1", RequestID: "0", Command: "make test", Cwd: "/w"})
	if err != nil {
		decision = protocol.DecisionDecline
	}
	status()
	item(protocol.NotifyItemCompleted, "call-1", map[bool]string{true: "completed", false: "declined"}[decision == protocol.DecisionAccept])
	if ctx.Err() != nil {
		return interrupted()
	}
	if text == "ask-late" {
		<-ctx.Done()
		return interrupted()
	}
	r := result(protocol.TurnCompleted)
	r.Notifications = appservertest.TurnNotifications(threadID, turnID, protocol.TurnCompleted, "decision: "+decision)
	return r, nil
}
