package appserver

import (
	"context"
	"fmt"
	"strings"

	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// HistoryTurn is one turn of a thread's persisted history with every item looked at (the
// "full" items view): what /undo needs to take turns back.
type HistoryTurn struct {
	ID     string
	Status string
	// UserTexts are the texts of the turn's user messages, in order; a turn without one is not
	// an exchange (a compaction's turn has none).
	UserTexts []string
	// Files are the paths the turn's fileChange items changed, in order, each once.
	Files []string
	// Compaction is set on a turn that compacted the thread (a contextCompaction item).
	Compaction bool
}

// maxTurnPages bounds ListTurns' paging.
const maxTurnPages = 50

// ListTurns returns up to limit of the thread's newest turns, newest first, with
// thread/turns/list in the full items view, following nextCursor. The thread must be loaded in
// this process.
func (c *Client) ListTurns(ctx context.Context, threadID string, limit int) ([]HistoryTurn, error) {
	var out []HistoryTurn
	cursor := ""
	for range maxTurnPages {
		var res protocol.ThreadTurnsResult
		err := c.call(ctx, protocol.MethodThreadTurns, protocol.ThreadTurnsParams{ThreadID: threadID, Cursor: cursor,
			Limit: limit - len(out), SortDirection: protocol.SortDesc, ItemsView: protocol.TurnItemsFull}, &res)
		if err != nil {
			return nil, fmt.Errorf("list turns of thread %s: %w", threadID, err)
		}
		for _, t := range res.Data {
			if t.ID == "" {
				return nil, fmt.Errorf("list turns of thread %s on codex pid %d: %w: turn without id", threadID, c.pid, ErrProtocol)
			}
			out = append(out, historyTurn(t))
		}
		if len(out) >= limit || res.NextCursor == nil || *res.NextCursor == "" || *res.NextCursor == cursor || len(res.Data) == 0 {
			return out[:min(len(out), limit)], nil
		}
		cursor = *res.NextCursor
	}
	return out, nil
}

// historyTurn reads a stored turn's items.
func historyTurn(t protocol.Turn) HistoryTurn {
	h := HistoryTurn{ID: t.ID, Status: t.Status}
	seen := map[string]bool{}
	for _, raw := range t.Items {
		it, err := protocol.DecodeItem(raw)
		if err != nil {
			continue
		}
		switch it.Type {
		case protocol.ItemUserMessage:
			var text strings.Builder
			for _, part := range it.Content {
				if part.Type == "text" {
					text.WriteString(part.Text)
				}
			}
			h.UserTexts = append(h.UserTexts, text.String())
		case protocol.ItemFileChange:
			if it.Status != protocol.ItemStatusCompleted {
				continue // declined or failed: nothing was written
			}
			for _, ch := range it.Changes {
				if ch.Path != "" && !seen[ch.Path] {
					seen[ch.Path] = true
					h.Files = append(h.Files, ch.Path)
				}
			}
		case protocol.ItemContextCompaction:
			h.Compaction = true
		}
	}
	return h
}
