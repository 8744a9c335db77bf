package inbound

// Delegation results. When the platform flag DELEGATION_RESULT_INBOX_PUSH=1 is set, the
// platform writes the end of a delegation this workspace started into its own activity feed
// (workspace-server handlers/delegation.go, pushDelegationResultToInbox):
//
//	activity_type a2a_receive, method delegate_result, source_id = this workspace (the caller),
//	target_id = the callee (null when the callee reported through the status API),
//	request_body {"delegation_id"}, response_body {"text", "delegation_id"},
//	summary "Delegation result delivered" with status ok, or "Delegation failed" with
//	status error and error_detail.
//
// The result is the answer to what this workspace's agent asked, so codex gets a turn on it, in
// the callee's chat (peer:<target_id>), the thread that talks with that workspace; Molecule's
// runtime likewise hands it to its agent as a message of kind delegation_result (inbox.py). The
// turn's reply goes to this workspace's canvas user, never to the callee: answering the callee
// would start the two agents talking without end.

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/molecule-ai/codex-warm/bridge/chat"
	"github.com/molecule-ai/codex-warm/bridge/molecule/ledger"
)

// MethodDelegateResult is the activity method of a delegation's result.
const MethodDelegateResult = "delegate_result"

// maxDelegationErrorBytes caps a failed delegation's error_detail given to codex: the platform
// stores it unbounded, and the runtime caps the one it reports at 4096.
const maxDelegationErrorBytes = 4096

// normalizeDelegation reads a delegate_result row (n holds its id and seq). Rows of older
// platforms, which named the callee as source_id and carried the text in message parts, are
// read too.
func normalizeDelegation(n Normalized, row map[string]json.RawMessage, cfg Config) Normalized {
	m := &n.Msg
	m.Kind = KindDelegationResult
	m.CreatedAt = rawString(row["created_at"])
	m.Route = ledger.Route{Kind: RouteNotify, Workspace: cfg.WorkspaceID}

	callee := rawString(row["target_id"])
	if source := rawString(row["source_id"]); callee == "" && source != cfg.WorkspaceID {
		callee = source
	}
	if ValidWorkspaceID(callee) && callee != cfg.WorkspaceID {
		m.PeerID = callee
		m.ChatKey = "peer:" + callee
	} else {
		callee = ""
		m.ChatKey = OneoffKey(m.ActivityID)
	}

	req := requestBody(row["request_body"])
	resp := requestBody(row["response_body"])
	delegationID := firstString(resp, "delegation_id")
	if delegationID == "" {
		delegationID = firstString(req, "delegation_id")
	}
	text := firstString(resp, "text")
	if strings.TrimSpace(text) == "" {
		if parts, ok := findParts(req); ok {
			texts, _, _, _ := splitParts(parts, Config{})
			text = strings.Join(texts, "\n")
		}
	}
	summary := rawString(row["summary"])
	if strings.TrimSpace(text) == "" && resp == nil {
		// An older platform's row: no response_body, the result in summary.
		text = summary
	}
	failed := rawString(row["status"]) == "error" || strings.EqualFold(strings.TrimSpace(summary), "Delegation failed")

	who := "another workspace"
	if callee != "" {
		who = "workspace " + callee
	}
	if delegationID != "" {
		who += " (delegation " + chat.Truncate(strings.Join(strings.Fields(delegationID), " "), 80, "id") + ")"
	}
	var out string
	switch {
	case failed:
		detail := rawString(row["error_detail"])
		if strings.TrimSpace(detail) == "" {
			detail = firstString(resp, "error")
		}
		if strings.TrimSpace(detail) == "" {
			detail = "no reason given"
		}
		out = fmt.Sprintf("The work delegated to %s failed: %s", who, chat.Truncate(detail, maxDelegationErrorBytes, "error"))
		if strings.TrimSpace(text) != "" {
			out += "\n\nWhat it returned:\n" + text
		}
	case strings.TrimSpace(text) == "":
		out = fmt.Sprintf("The work delegated to %s finished without a result text (%s).", who, chat.CapText(summary, 80))
	default:
		out = fmt.Sprintf("Result of the work delegated to %s:\n\n%s", who, text)
	}
	m.Text, m.OmittedBytes = ComposeText(out, nil, cfg.MaxTextBytes)
	m.DelegationID = delegationID
	return n
}
