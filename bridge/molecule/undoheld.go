package molecule

import (
	"context"
	"fmt"

	"github.com/molecule-ai/codex-warm/bridge/chat"
	"github.com/molecule-ai/codex-warm/supervisor/chatjob"
)

// heldUndoControls answer a /undo of a chat whose own queue holds a job: a message this inbox
// has not handed to the supervisor yet (one waiting for a slot, say), which the supervisor's
// own check cannot see. /undo is refused while a message of the chat waits: it would take back
// the exchange before that message, which then runs.
type heldUndoControls struct{ chat.Controls }

// Undo refuses: a message of the chat waits.
func (heldUndoControls) Undo(_ context.Context, chatKey string, _ int) (chatjob.UndoResult, error) {
	return chatjob.UndoResult{}, fmt.Errorf("chat %s: undo: this inbox holds a message of the chat: %w", chatKey, chatjob.ErrChatBusy)
}

// Compact is never asked of these Controls (only a /undo gets them); it refuses alike.
func (heldUndoControls) Compact(_ context.Context, chatKey string) (chatjob.CompactResult, error) {
	return chatjob.CompactResult{}, fmt.Errorf("chat %s: compact: %w", chatKey, chatjob.ErrChatBusy)
}

// ObserveCommand counts the /undo as the inbox's own Controls count commands.
func (h heldUndoControls) ObserveCommand(name string) {
	if o, ok := h.Controls.(chat.CommandObserver); ok {
		o.ObserveCommand(name)
	}
}
