package appserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"

	"github.com/sourcegraph/jsonrpc2"
	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// DecisionAsk is a Policy value (Command, FileChange) that leaves the decision to the running
// turn's TurnOptions.Approve: a person answers. Without an Approve, or when it fails, the request
// is declined.
const DecisionAsk = "ask"

// AskPolicy asks TurnOptions.Approve about commands and file changes. It still grants no extra
// permissions and declines elicitations.
func AskPolicy() Policy {
	return Policy{Command: DecisionAsk, FileChange: DecisionAsk}
}

// Approval request kinds (ApprovalRequest.Kind).
const (
	ApprovalCommand    = "command"
	ApprovalFileChange = "fileChange"
)

// ApprovalRequest is an approval codex asks for, as shown to a person.
type ApprovalRequest struct {
	// Kind is ApprovalCommand or ApprovalFileChange.
	Kind     string
	ThreadID string
	TurnID   string
	ItemID   string
	// RequestID is the JSON-RPC id of codex's request, as its JSON text ("0", "\"a\""). With
	// the thread it names the request uniquely within one child.
	RequestID string
	// Command and Cwd are the command's (ApprovalCommand).
	Command string
	Cwd     string
	// Reason is codex's explanation, if it gave one.
	Reason string
	// Changes are the files of the fileChange item (ApprovalFileChange), taken from its
	// item/started: the request itself does not list them.
	Changes []protocol.FileUpdateChange
	// Offered are the decisions the request lists as strings; nil when it listed none.
	Offered []string
}

// Approver decides an approval request: protocol.DecisionAccept, DecisionAcceptForSession,
// DecisionDecline or DecisionCancel. ctx ends when the turn ends, the turn's context is done or
// the child fails; an error (or a decision the request does not offer) declines.
type Approver func(ctx context.Context, req ApprovalRequest) (decision string, err error)

// asks reports whether the policy leaves method's answer to a person.
func (p Policy) asks(method string) bool {
	switch method {
	case protocol.RequestCommandApproval:
		return p.Command == DecisionAsk
	case protocol.RequestFileChangeApproval:
		return p.FileChange == DecisionAsk
	}
	return false
}

// approvalParams are the fields of both approval requests shown to a person.
type approvalParams struct {
	protocol.ApprovalParams
	Cwd string `json:"cwd,omitempty"`
}

// noteFileChange keeps the changes of a fileChange item from its item/started, for the approval
// request that may follow. It runs on the dispatcher, which owns t.files.
func (t *turnState) noteFileChange(n protocol.Notification) {
	if n.Method != protocol.NotifyItemStarted || !mayNameFileChange(n.Params) {
		return
	}
	var in protocol.ItemNotification
	if json.Unmarshal(n.Params, &in) != nil {
		return
	}
	it, err := protocol.DecodeItem(in.Item)
	if err != nil || it.Type != protocol.ItemFileChange || it.ID == "" {
		return
	}
	if t.files == nil {
		t.files = make(map[string][]protocol.FileUpdateChange)
	}
	t.files[it.ID] = it.Changes
}

// mayNameFileChange is false for params that cannot hold a fileChange item: the type's name
// appears neither plainly nor with an escape in it. Most items of a turn are not file changes,
// and this spares each of them a full decode.
func mayNameFileChange(params []byte) bool {
	return bytes.Contains(params, []byte(protocol.ItemFileChange)) || bytes.Contains(params, []byte(`\u`))
}

// ask hands an approval request to the running turn's Approver on a goroutine of its own (the
// dispatcher must go on delivering notifications meanwhile) and replies with its decision. It
// reports false when no turn of the request's thread with an Approver runs: the caller declines.
// It runs on the dispatcher.
func (c *Client) ask(req *jsonrpc2.Request, log *zap.Logger) bool {
	var raw json.RawMessage
	if req.Params != nil {
		raw = *req.Params
	}
	var ap approvalParams
	if json.Unmarshal(raw, &ap) != nil {
		return false
	}
	t := c.turnOf(ap.ThreadID)
	if t == nil || ap.ThreadID == "" {
		return false
	}
	t.mu.Lock()
	approve, askCtx := t.approve, t.askCtx
	if approve == nil && t.adopted {
		// A handed-over turn whose Approver is not attached yet: ResumeTurn asks it.
		t.deferred = append(t.deferred, req)
		t.mu.Unlock()
		return true
	}
	t.mu.Unlock()
	if approve == nil {
		return false
	}
	ar := ApprovalRequest{
		Kind: ApprovalCommand, ThreadID: ap.ThreadID, TurnID: ap.TurnID, ItemID: ap.ItemID,
		RequestID: req.ID.String(), // a string id keeps its quotes: 7 and "7" stay apart
		Command:   ap.Command, Cwd: ap.Cwd, Offered: available(req.Params),
	}
	if req.Method == protocol.RequestFileChangeApproval {
		ar.Kind, ar.Changes = ApprovalFileChange, t.files[ap.ItemID]
	}
	if ap.Reason != nil {
		ar.Reason = *ap.Reason
	}
	c.trackAsk(req)
	// The dispatcher is in wg while it runs, so Add cannot race with Close's Wait.
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer c.untrackAsk(req)
		decision, err := approve(askCtx, ar)
		if err != nil {
			log.Info("approval not given; declining", zap.Error(err))
			decision = protocol.DecisionDecline
		}
		decision = resolveDecision(decision, ar.Offered)
		log.Info("server request answered by a person", zap.String("decision", decision))
		if err := c.conn.Reply(context.Background(), req.ID, protocol.ApprovalResponse{Decision: decision}); err != nil {
			log.Debug("reply to server request", zap.Error(err))
		}
	}()
	return true
}

// errTurnOver is the cause of an Approver's context when its turn ended.
var errTurnOver = errors.New("turn ended")
