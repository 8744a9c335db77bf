package chat

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/protocol"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// TestApprovalCommands: /approve, /approve session and /deny answer the pending approval with
// the matching decision; with none pending the chat is told so.
func TestApprovalCommands(t *testing.T) {
	a := supervisor.Approval{ApprovalRequest: appserver.ApprovalRequest{Kind: appserver.ApprovalCommand, Command: "make test"}, Seq: 3}
	for _, tc := range []struct {
		text, call, want string
	}{
		{"/approve", "answer k 0 accept", "approved 3: make test"},
		{"/APPROVE session", "answer k 0 acceptForSession", "approved 3 for the rest of this conversation: make test"},
		{"/approve 3", "answer k 3 accept", "approved 3: make test"},
		{"/approve 3 session", "answer k 3 acceptForSession", "approved 3 for the rest of this conversation: make test"},
		{"/approve session #3", "answer k 3 acceptForSession", "approved 3 for the rest of this conversation: make test"},
		{"/deny", "answer k 0 decline", "denied 3: make test"},
		{"/deny 3", "answer k 3 decline", "denied 3: make test"},
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
	for _, text := range []string{"/approve forever", "/deny 3 session", "/approve 3 4", "/approve 0"} {
		cmd, _ = ParseCommand(text)
		if f := (&chattest.Controls{Approval: a, ApprovalOK: true, Asks: true}); !strings.HasPrefix(RunCommand(context.Background(), f, "k", cmd, 0), "use /approve N") || len(f.Log) != 0 {
			t.Errorf("%s answered something: %v", text, f.Log)
		}
	}
	cmd, _ = ParseCommand("/status")
	if got := RunCommand(context.Background(), &chattest.Controls{Approval: a, ApprovalOK: true}, "k", cmd, 0); !strings.Contains(got, "Approval 3: codex asks to run a command:\n  make test") {
		t.Errorf("/status does not show the pending approval: %q", got)
	}
}

// TestApprovalPrompt: the prompt names the command or the files and reason, and how to answer.
func TestApprovalPrompt(t *testing.T) {
	cmd := ApprovalPrompt(supervisor.Approval{ApprovalRequest: appserver.ApprovalRequest{
		Kind: appserver.ApprovalCommand, Command: "rm -rf build", Cwd: "/w"}, Seq: 7, Expires: time.Now().Add(10 * time.Minute)})
	for _, want := range []string{"Approval 7: ", "rm -rf build", "in /w", "/approve 7 ", "/approve 7 session", "/deny 7.", "declined in"} {
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

// TestApprovalPromptShowsCommandWhole: the command is shown whole, never cut, with control and
// format characters (carriage return, escape, bidi override) written as escapes.
func TestApprovalPromptShowsCommandWhole(t *testing.T) {
	long := "echo a" + strings.Repeat(" ", supervisor.MaxApprovalCommandBytes-20) + "; echo tail"
	got := ApprovalPrompt(supervisor.Approval{ApprovalRequest: appserver.ApprovalRequest{
		Kind: appserver.ApprovalCommand, Command: long + "\r\x1b[2K\u202e"}})
	if !strings.Contains(got, long+`\u000d\u001b[2K\u202e`) {
		t.Errorf("prompt does not show the command whole and visible: %q", got[max(0, len(got)-300):])
	}
}
