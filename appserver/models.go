package appserver

import (
	"context"
	"fmt"

	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// maxModelPages bounds ListModels: a catalog of more pages than this is a codex gone wrong.
const maxModelPages = 50

// ListModels returns codex's model catalog (model/list), every page, following nextCursor;
// hidden models are included when includeHidden is set. codex answers with its built-in
// catalog whatever the configured provider: with another provider it does not say what that
// provider serves.
func (c *Client) ListModels(ctx context.Context, includeHidden bool) ([]protocol.Model, error) {
	return c.listModels(ctx, includeHidden, 0)
}

// listModels is ListModels with pages of at most limit models (0: codex's own size).
func (c *Client) listModels(ctx context.Context, includeHidden bool, limit int) ([]protocol.Model, error) {
	var out []protocol.Model
	cursor := ""
	for range maxModelPages {
		var res protocol.ModelListResult
		err := c.call(ctx, protocol.MethodModelList, protocol.ModelListParams{Cursor: cursor, IncludeHidden: includeHidden, Limit: limit}, &res)
		if err != nil {
			return nil, fmt.Errorf("list models of codex pid %d: %w", c.pid, err)
		}
		out = append(out, res.Data...)
		if res.NextCursor == nil || *res.NextCursor == "" {
			return out, nil
		}
		if *res.NextCursor == cursor {
			return nil, fmt.Errorf("list models of codex pid %d: %w: model/list gave the same cursor again", c.pid, ErrProtocol)
		}
		cursor = *res.NextCursor
	}
	return nil, fmt.Errorf("list models of codex pid %d: %w: more than %d pages", c.pid, ErrProtocol, maxModelPages)
}
