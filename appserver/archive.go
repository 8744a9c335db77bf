package appserver

import (
	"context"
	"fmt"

	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// ArchiveThread archives threadID (thread/archive): codex moves its rollout from
// CODEX_HOME/sessions to CODEX_HOME/archived_sessions, where it takes the same space but is out
// of the live folder; thread/resume no longer finds it until UnarchiveThread.
func (c *Client) ArchiveThread(ctx context.Context, threadID string) error {
	if err := c.call(ctx, protocol.MethodThreadArchive, protocol.ThreadIDParams{ThreadID: threadID}, nil); err != nil {
		return fmt.Errorf("archive thread %s: %w", threadID, err)
	}
	return nil
}

// UnarchiveThread moves an archived thread's rollout back to CODEX_HOME/sessions
// (thread/unarchive), so that it can be resumed again.
func (c *Client) UnarchiveThread(ctx context.Context, threadID string) error {
	if err := c.call(ctx, protocol.MethodThreadUnarchive, protocol.ThreadIDParams{ThreadID: threadID}, nil); err != nil {
		return fmt.Errorf("unarchive thread %s: %w", threadID, err)
	}
	return nil
}
