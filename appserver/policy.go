package appserver

import (
	"encoding/json"
	"fmt"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// Policy decides how the client answers codex's server-initiated requests. A headless daemon
// has nobody to ask, and an unanswered request hangs the turn, so every request gets an answer
// at once: the decisions below for approvals, nothing granted for permission requests, decline
// for MCP elicitations, no answers for tool user input, and -32601 for anything else.
type Policy struct {
	// Command answers item/commandExecution/requestApproval: protocol.DecisionAccept,
	// DecisionAcceptForSession, DecisionDecline or DecisionCancel. Empty means decline.
	// DecisionAsk leaves it to the running turn's TurnOptions.Approve (declined without one).
	Command string
	// FileChange answers item/fileChange/requestApproval, with the same values as Command.
	FileChange string
}

// DefaultPolicy declines commands and file changes, grants no permissions and declines
// elicitations: a declined command completes as a "declined" item and the turn goes on.
func DefaultPolicy() Policy {
	return Policy{Command: protocol.DecisionDecline, FileChange: protocol.DecisionDecline}
}

// AcceptPolicy accepts commands and file changes (once, not for the session). It still grants no
// extra permissions and declines elicitations.
func AcceptPolicy() Policy {
	return Policy{Command: protocol.DecisionAccept, FileChange: protocol.DecisionAccept}
}

// Legacy (v1) approval requests, still part of the server's request union.
const (
	legacyExecApproval  = "execCommandApproval"
	legacyPatchApproval = "applyPatchApproval"
)

// answer returns the result for a server request, or the JSON-RPC error to reply with.
func (p Policy) answer(method string, params *json.RawMessage) (any, *jsonrpc2.Error) {
	switch method {
	case protocol.RequestCommandApproval:
		return protocol.ApprovalResponse{Decision: resolveDecision(p.Command, available(params))}, nil
	case protocol.RequestFileChangeApproval:
		return protocol.ApprovalResponse{Decision: resolveDecision(p.FileChange, available(params))}, nil
	case protocol.RequestPermissionsApproval:
		return protocol.PermissionsResponse{Permissions: map[string]any{}, Scope: "turn"}, nil
	case protocol.RequestMCPElicitation:
		return protocol.ElicitationResponse{Action: "decline"}, nil
	case protocol.RequestToolUserInput:
		return protocol.UserInputResponse{Answers: map[string]any{}}, nil
	case legacyExecApproval, legacyPatchApproval:
		return legacyDecision(p.Command, method), nil
	}
	return nil, &jsonrpc2.Error{
		Code:    protocol.CodeMethodNotFound,
		Message: fmt.Sprintf("codex-warm does not handle server request %q", method),
	}
}

// available returns the string decisions of params.availableDecisions; object decisions (e.g.
// acceptWithExecpolicyAmendment) are skipped because the policy never picks them. Nil means the
// request did not restrict the decisions. Params that cannot be read (absent, null, not an
// object, availableDecisions not a list) offer nothing: an approval is never sent for a request
// whose content is unknown.
func available(params *json.RawMessage) []string {
	if params == nil {
		return []string{}
	}
	var ap *protocol.ApprovalParams
	if json.Unmarshal(*params, &ap) != nil || ap == nil {
		return []string{}
	}
	if ap.AvailableDecisions == nil {
		return nil
	}
	out := make([]string, 0, len(ap.AvailableDecisions))
	for _, raw := range ap.AvailableDecisions {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			out = append(out, s)
		}
	}
	return out
}

// resolveDecision maps the configured decision onto what the request offers.
//
// An accept that is not offered is never sent: the policy falls back to declining, so honouring
// availableDecisions can only make the answer more restrictive.
//
// "decline" is sent even when the request does not list it. codex 0.169 lists only accept,
// acceptWithExecpolicyAmendment and cancel for commands, yet it takes "decline" and continues the
// turn with a "declined" item (recorded in testdata/codex-wire/approval-declined.jsonl), whereas
// "cancel" interrupts the whole turn (schema: "The turn will also be immediately interrupted"), so
// the user would get no answer at all. A configured "cancel" is sent as is.
func resolveDecision(want string, offered []string) string {
	if want == "" || want == DecisionAsk {
		// DecisionAsk reaches here only when nobody could be asked.
		want = protocol.DecisionDecline
	}
	if offered == nil || want == protocol.DecisionDecline || want == protocol.DecisionCancel {
		return want
	}
	has := func(d string) bool {
		for _, o := range offered {
			if o == d {
				return true
			}
		}
		return false
	}
	switch {
	case has(want):
		return want
	case want == protocol.DecisionAcceptForSession && has(protocol.DecisionAccept):
		return protocol.DecisionAccept // narrower than asked: fine
	}
	return protocol.DecisionDecline
}

// legacyDecision answers the v1 approval requests, whose decisions are ReviewDecision values.
func legacyDecision(want, method string) any {
	switch want {
	case protocol.DecisionAccept:
		return map[string]any{"decision": "approved"}
	case protocol.DecisionAcceptForSession:
		return map[string]any{"decision": "approved_for_session"}
	case protocol.DecisionCancel:
		return map[string]any{"decision": "abort"}
	}
	return map[string]any{"decision": map[string]any{
		"denied": map[string]any{"rejection": "declined by the codex-warm approval policy (" + method + ")"},
	}}
}
