package local

import (
	"net/http"

	"github.com/molecule-ai/codex-warm/supervisor"
)

// ChatStatusSource tells a chat's state; *supervisor.Supervisor is one. ChatStatus must not wait
// behind the chat's queue.
type ChatStatusSource interface {
	ChatStatus(chatKey string) (row supervisor.ChildStatus, ok bool, lastErr string)
}

// StateNoSession is Chat.State of a chat with no codex child now: its next message starts
// one (resuming the chat's thread, if it has one).
const StateNoSession supervisor.State = "none"

// Chat is the answer of GET /v1/chats/{chatKey}: the chat's row of the process table
// (`supervisor status`), with what its running turn is doing (activity, activity_since), how
// many messages wait behind it, and its last error.
type Chat struct {
	supervisor.ChildStatus
	// Session is false when no codex child runs for the chat; then State is "none" and only
	// chat_key, queued and last_error are meaningful.
	Session bool `json:"session"`
	// LastError is the error of the chat's last message; empty after a success.
	LastError string `json:"last_error,omitempty"`
}

// getChat answers GET /v1/chats/{chatKey}. A chat without a child is answered 200 with state
// "none", not 404: any valid key is a chat, whose next message starts a session.
func (h *Inbox) getChat(w http.ResponseWriter, r *http.Request) {
	key, ok := chatKeyOf(w, r)
	if !ok {
		return
	}
	if h.cfg.Chats == nil {
		writeJSON(w, http.StatusNotFound, ErrorReply{Error: "chat state is not available on this inbox"})
		return
	}
	row, ok, lastErr := h.cfg.Chats.ChatStatus(key)
	row.ChatKey = key
	if !ok {
		row.State = StateNoSession
	}
	writeJSON(w, http.StatusOK, Chat{ChildStatus: row, Session: ok, LastError: lastErr})
}
