package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/local"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// paddedCommand hides "; echo hidden-ran" behind 3,000 spaces: past the prompt's 2,000-byte cut.
var paddedCommand = "echo shown > /dev/null" + strings.Repeat(" ", 3000) + "; echo hidden-ran"

func paddedScript(req mockmodel.Request) mockmodel.Reply {
	if !req.HasToolOutput && req.LastUserText == "run padded" {
		args, _ := json.Marshal(map[string]any{"cmd": paddedCommand, "login": false})
		return mockmodel.Reply{ToolCall: &mockmodel.ToolCall{Arguments: string(args)}}
	}
	return mockmodel.DefaultScript(req)
}

// A person must see everything they approve. A command too long to show whole in a prompt is
// not offered for /approve: it is declined at once, nothing is asked, and the reply says why.
// Real codex, local inbox; an /approve sent anyway finds nothing, and the hidden part never runs.
func TestE2EApprovalTooLongToShowIsDeclined(t *testing.T) {
	e := newE2E(t, e2eConfig{Local: true, Script: paddedScript})
	d := e.start(approvalArgs(time.Minute)...)
	c := newLocalClient(t, d)
	reply := c.sendAsync("k", "run padded")
	var r local.Reply
	d.waitUntil("the turn to end or the approval to be asked", func() bool {
		select {
		case r = <-reply:
			return true
		default:
		}
		if a, ok := c.pendingApproval("k"); ok {
			if !strings.Contains(a.Text, "hidden-ran") {
				t.Errorf("prompt offers /approve for a command it does not show whole:\n%s", capString(a.Text, 300)+" … "+a.Text[max(0, len(a.Text)-300):])
			}
			c.send("k", "/approve") // what a person shown the head would do
			r = <-reply
			return true
		}
		return false
	})
	if strings.Contains(r.Text, "hidden-ran\n") || strings.Contains(r.Text, "Process exited with code 0") {
		t.Errorf("the hidden command ran: %q", r.Text)
	}
	if !strings.Contains(r.Text, "too long to show") {
		t.Errorf("the reply does not say why the command was declined: %q", r.Text)
	}
	if n := len(d.logsWith("approval asked in the chat")); n != 0 {
		t.Errorf("%d approvals asked for a command that cannot be shown whole", n)
	}
}
