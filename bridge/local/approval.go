package local

import (
	"net/http"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/chat"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// Approval is the answer of GET /v1/chats/{chatKey}/approval: what the chat's running turn
// waits for. Text is the prompt a chat would see.
type Approval struct {
	ChatKey   string                      `json:"chat_key"`
	Kind      string                      `json:"kind"`
	Command   string                      `json:"command,omitempty"`
	Cwd       string                      `json:"cwd,omitempty"`
	Reason    string                      `json:"reason,omitempty"`
	Changes   []protocol.FileUpdateChange `json:"changes,omitempty"`
	RequestID string                      `json:"request_id"`
	TurnID    string                      `json:"turn_id"`
	Asked     time.Time                   `json:"asked"`
	Expires   time.Time                   `json:"expires"`
	Text      string                      `json:"text"`
	// Number is what /approve N and /deny N name; Pending counts the approvals waiting for
	// this chat's answer (this one is the oldest).
	Number  uint64 `json:"number"`
	Pending int    `json:"pending"`
}

// getApproval answers GET /v1/chats/{chatKey}/approval: the POST of a message whose turn waits
// for an approval cannot answer yet, so the caller reads the prompt here (or with /status) and
// answers with /approve or /deny in another POST.
func (h *Inbox) getApproval(w http.ResponseWriter, r *http.Request) {
	key, ok := chatKeyOf(w, r)
	if !ok {
		return
	}
	if h.cfg.Controls == nil {
		writeJSON(w, http.StatusNotFound, ErrorReply{Error: "chat commands are off: nothing can be approved in the chat"})
		return
	}
	list := h.cfg.Controls.PendingApprovals(key)
	if len(list) == 0 {
		writeJSON(w, http.StatusNotFound, ErrorReply{Error: "nothing is waiting for approval in this chat"})
		return
	}
	a := list[0]
	writeJSON(w, http.StatusOK, Approval{Number: a.Seq, Pending: len(list),
		ChatKey: key, Kind: a.Kind, Command: a.Command, Cwd: a.Cwd, Reason: a.Reason, Changes: a.Changes,
		RequestID: a.RequestID, TurnID: a.TurnID, Asked: a.Asked, Expires: a.Expires, Text: chat.ApprovalPrompt(a),
	})
}
