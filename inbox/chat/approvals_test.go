package chat

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/inbox/chat/chattest"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/protocol"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// TestApprovalCommands: /approve, /approve session and /deny answer the pending approval with
// the matching decision; with none pending the chat is told so.
func TestApprovalCommands(t *testing.T) {
	a := supervisor.Approval{ApprovalRequest: appserver.ApprovalRequest{Kind: appserver.ApprovalCommand, Command: "make test"}}
	for _, tc := range []struct {
		text, call, want string
	}{
		{"/approve", "answer k accept", "approved: make test"},
		{"/APPROVE session", "answer k acceptForSession", "approved for the rest of this conversation: make test"},
		{"/deny", "answer k decline", "denied: make test"},
	} {
		cmd, ok := ParseCommand(tc.text)
		if !ok {
			t.Fatalf("%q is not a command", tc.text)
		}
		f := &chattest.Controls{Approval: a, ApprovalOK: true, Asks: true}
		if got := RunCommand(context.Background(), f, "k", cmd, 0); got != tc.want || len(f.Log) != 1 || f.Log[0] != tc.call {
			t.Errorf("%s: %q, calls %v; want %q, %s", tc.text, got, f.Log, tc.want, tc.call)
		}
	}
	cmd, _ := ParseCommand("/approve")
	if got := RunCommand(context.Background(), &chattest.Controls{Asks: true}, "k", cmd, 0); got != "nothing is waiting for your approval" {
		t.Errorf("nothing pending: %q", got)
	}
	cmd, _ = ParseCommand("/approve forever")
	if f := (&chattest.Controls{Approval: a, ApprovalOK: true, Asks: true}); RunCommand(context.Background(), f, "k", cmd, 0) != "use /approve, /approve session or /deny" || len(f.Log) != 0 {
		t.Errorf("/approve forever answered something: %v", f.Log)
	}
	cmd, _ = ParseCommand("/status")
	if got := RunCommand(context.Background(), &chattest.Controls{Approval: a, ApprovalOK: true}, "k", cmd, 0); !strings.Contains(got, "codex asks to run a command:\n  make test") {
		t.Errorf("/status does not show the pending approval: %q", got)
	}
}

// TestApprovalPrompt: the prompt names the command or the files and reason, and how to answer.
func TestApprovalPrompt(t *testing.T) {
	cmd := ApprovalPrompt(supervisor.Approval{ApprovalRequest: appserver.ApprovalRequest{
		Kind: appserver.ApprovalCommand, Command: "rm -rf build", Cwd: "/w"}, Expires: time.Now().Add(10 * time.Minute)})
	for _, want := range []string{"rm -rf build", "in /w", "/approve", "/approve session", "/deny", "declined in"} {
		if !strings.Contains(cmd, want) {
			t.Errorf("command prompt lacks %q: %q", want, cmd)
		}
	}
	files := ApprovalPrompt(supervisor.Approval{ApprovalRequest: appserver.ApprovalRequest{
		Kind: appserver.ApprovalFileChange, Reason: "write the greeting",
		Changes: []protocol.FileUpdateChange{{Path: "/w/a.txt", Kind: json.RawMessage(`{"type":"add"}`), Diff: "+hi\n+there\n"}}}})
	for _, want := range []string{"change files (write the greeting)", "add /w/a.txt (2 diff lines)", "/deny"} {
		if !strings.Contains(files, want) {
			t.Errorf("file prompt lacks %q: %q", want, files)
		}
	}
}
