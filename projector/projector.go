// Package projector turns one turn's app-server notifications into what the daemon needs: the
// reply text, a transcript, tool-call count, token usage and abort markers. It does no I/O.
package projector

import "github.com/molecule-ai/codex-warm/appserver/protocol"

// Usage is the token usage of one turn.
type Usage struct {
	InputTokens           int64 `json:"input_tokens"`
	CachedInputTokens     int64 `json:"cached_input_tokens"`
	OutputTokens          int64 `json:"output_tokens"`
	ReasoningOutputTokens int64 `json:"reasoning_output_tokens"`
	TotalTokens           int64 `json:"total_tokens"`
}

// Entry is one transcript line.
type Entry struct {
	ID     string `json:"id"`
	Role   string `json:"role"` // user | assistant | tool_call | tool_result
	Kind   string `json:"kind"` // the codex item type
	Text   string `json:"text"`
	Tool   string `json:"tool,omitempty"`
	Status string `json:"status,omitempty"`
}

// Projection is everything derived from one turn.
type Projection struct {
	ThreadID   string
	TurnID     string
	Status     string
	Error      *protocol.TurnError
	Reply      string
	Transcript []Entry
	ToolCalls  int
	Usage      Usage
	Aborted    bool
}

// Project derives a Projection from a turn's notifications in arrival order.
// PLACEHOLDER: the projector helper replaces this file.
func Project(notifs []protocol.Notification) Projection { return Projection{} }
