package hosts

import (
	"context"
	"fmt"

	"github.com/molecule-ai/codex-warm/appserver"
)

// turnLister is a Child that lists a thread's stored turns (appserver.Client).
type turnLister interface {
	ListTurns(ctx context.Context, threadID string, limit int) ([]appserver.HistoryTurn, error)
}

var _ turnLister = (*appserver.Client)(nil)

// ListTurns lists the view's thread's newest turns when the host's child can (turnLister).
func (v *View) ListTurns(ctx context.Context, threadID string, limit int) ([]appserver.HistoryTurn, error) {
	c, ok := v.host.child.(turnLister)
	if !ok {
		return nil, fmt.Errorf("codex pid %d cannot list a thread's turns", v.host.pid)
	}
	return c.ListTurns(ctx, threadID, limit)
}
