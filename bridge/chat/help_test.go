package chat

import (
	"context"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
)

// /help lists /approve and /deny only where they can be used: with --approval ask. Elsewhere
// they are not offered, and typed anyway they say why nothing can be approved.
func TestHelpListsApprovalsOnlyWhenAsked(t *testing.T) {
	ctx := context.Background()
	off := &chattest.Controls{}
	if got := RunCommand(ctx, off, "k", Command{Name: cmdHelp}, 0); strings.Contains(got, "/approve") || strings.Contains(got, "/deny") {
		t.Errorf("help with approvals off lists them:\n%s", got)
	}
	for _, name := range []string{cmdApprove, cmdDeny} {
		if got := RunCommand(ctx, off, "k", Command{Name: name}, 0); got != textApprovalsOff {
			t.Errorf("/%s with approvals off: %q", name, got)
		}
	}
	if len(off.Log) != 0 {
		t.Errorf("approvals off, yet the supervisor was asked: %v", off.Log)
	}
	on := &chattest.Controls{Asks: true}
	if got := RunCommand(ctx, on, "k", Command{Name: cmdHelp}, 0); !strings.Contains(got, "/approve") || !strings.Contains(got, "/deny") {
		t.Errorf("help with approvals asked does not list them:\n%s", got)
	}
}
