package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/local"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// approvalCommand is what the mock model asks codex to run. The redirect keeps it off codex's
// list of known-safe commands, so the "untrusted" approval policy --approval ask sets asks for it
// (testdata/codex-wire/approval-declined.jsonl). It writes to /dev/null, not to a file: whether
// codex runs an approved command inside its read-only sandbox varied between runs (a file write
// failed once with "Read-only file system" under load), and the sandbox is not what this tests.
const approvalCommand = "echo shell-ran > /dev/null; echo shell-ran"

// approvalScript makes "run it" a tool call of approvalCommand; the rest is the default script.
func approvalScript(req mockmodel.Request) mockmodel.Reply {
	if !req.HasToolOutput && req.LastUserText == "run it" {
		args, _ := json.Marshal(map[string]any{"cmd": approvalCommand, "login": false})
		return mockmodel.Reply{ToolCall: &mockmodel.ToolCall{Name: "exec_command", Arguments: string(args)}}
	}
	return mockmodel.DefaultScript(req)
}

// Short watchdogs, so that an approval answered after them proves they were paused.
const (
	approvalTurnTimeout = 5 * time.Second
	approvalPostTool    = time.Second
)

func approvalArgs(timeout time.Duration) []string {
	return []string{"--approval", "ask", "--approval-timeout", timeout.String(),
		"--turn-timeout", approvalTurnTimeout.String(), "--post-tool-timeout", approvalPostTool.String()}
}

// pendingApproval reads GET /v1/chats/{key}/approval; ok is false on 404.
func (c *localClient) pendingApproval(chatKey string) (local.Approval, bool) {
	c.t.Helper()
	resp, err := c.hc.Get(c.base + "/v1/chats/" + chatKey + "/approval")
	if err != nil {
		c.t.Fatalf("GET approval: %v", err)
	}
	defer resp.Body.Close()
	var a local.Approval
	if resp.StatusCode != http.StatusOK {
		return a, false
	}
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		c.t.Fatal(err)
	}
	return a, true
}

// Approvals in chat on the local inbox, real codex: the approval is shown by GET and /status
// while the POST waits; /approve runs the command and /deny declines it, each answered after the
// turn deadline and the post-tool watch would have tripped. The turn completes every time on the
// same child.
func TestE2EApprovalLocal(t *testing.T) {
	t.Parallel()
	runApprovalCases(t, time.Minute, []approvalCase{
		{"/approve", "Process exited with code 0", "approved "},
		{"/deny", "rejected", "denied "},
	})
}

// Unanswered, an approval on the local inbox is declined at --approval-timeout and the turn
// completes on the same child. It has a daemon of its own, so that its wait for the timeout runs
// beside TestE2EApprovalLocal's waits for the watchdogs' time instead of after them.
func TestE2EApprovalLocalTimeout(t *testing.T) {
	t.Parallel()
	runApprovalCases(t, 15*time.Second, []approvalCase{{"", "rejected", ""}})
}

// approvalCase is a message whose turn asks for an approval, and how the chat answers it.
type approvalCase struct {
	answer    string // "" lets the approval time out
	wantReply string
	wantCmd   string
}

// runApprovalCases starts a local inbox daemon with --approval ask and the given approval timeout
// and runs the cases one after another in one chat, after a first message that opens its thread.
func runApprovalCases(t *testing.T, timeout time.Duration, cases []approvalCase) {
	e := newE2E(t, e2eConfig{Local: true, Script: approvalScript})
	d := e.start(approvalArgs(timeout)...)
	c := newLocalClient(t, d)
	first := c.send("k", "hello")
	if r := c.send("k", "/help"); !strings.Contains(r.Text, "/approve") || !strings.Contains(r.Text, "/deny") {
		t.Errorf("/help with --approval ask does not list /approve and /deny: %q", r.Text)
	}

	for _, tc := range cases {
		name := tc.answer
		if name == "" {
			name = "timeout"
		}
		t.Run(name, func(t *testing.T) {
			reply := c.sendAsync("k", "run it")
			var a local.Approval
			d.waitUntil("the approval to be asked", func() bool {
				var ok bool
				a, ok = c.pendingApproval("k")
				return ok
			})
			if a.Kind != "command" || !strings.Contains(a.Command, approvalCommand) || !strings.Contains(a.Text, "/approve") {
				t.Fatalf("approval %+v", a)
			}
			if s := c.send("k", "/status"); !strings.Contains(s.Text, "codex asks to run a command") {
				t.Errorf("/status does not show the approval: %q", s.Text)
			}
			if tc.answer != "" {
				// Past the turn deadline and the post-tool quiet: without the pause either would
				// have ended the turn by now.
				d.waitUntil("the watchdogs' time to pass", func() bool {
					return time.Since(a.Asked) > approvalTurnTimeout+approvalPostTool
				})
				if r := c.send("k", tc.answer); r.Status != local.StatusCommand || !strings.HasPrefix(r.Text, tc.wantCmd) ||
					!strings.Contains(r.Text, approvalCommand) {
					t.Fatalf("%s: %+v", tc.answer, r)
				}
			}
			r := <-reply
			if r.Status != "completed" || !strings.Contains(r.Text, tc.wantReply) || r.ThreadID != first.ThreadID {
				t.Fatalf("reply %+v, want completed with %q on thread %s", r, tc.wantReply, first.ThreadID)
			}
			took := time.Duration(r.DurationMS) * time.Millisecond
			if tc.answer == "" && took < timeout {
				t.Errorf("declined after %s, before the %s approval timeout", took, timeout)
			}
			if tc.answer != "" && took < approvalTurnTimeout {
				t.Errorf("turn took %s; the answer came after the turn deadline", took)
			}
			if _, ok := c.pendingApproval("k"); ok {
				t.Error("approval still pending after the turn")
			}
		})
	}
	if r := c.send("k", "/approve"); r.Text != "nothing is waiting for your approval" {
		t.Errorf("/approve with nothing pending: %+v", r)
	}
	st := d.status().Snapshot
	if len(st.Totals.Retired) != 0 {
		t.Errorf("a watchdog retired the child: totals %+v", st.Totals)
	}
	if logs := d.logsWith("turn ended by watchdog"); len(logs) != 0 {
		t.Errorf("watchdog tripped: %v", logs)
	}
}

// The Molecule inbox, real codex: the approval prompt reaches the canvas as a notify, the
// canvas's /approve is answered and acknowledged, and the message's reply shows the command ran.
func TestE2EApprovalMolecule(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Script: approvalScript})
	d := e.start(approvalArgs(time.Minute)...)
	e.plat.Enqueue(moleculetest.CanvasMessage("run it"))
	d.waitPlatform("the approval prompt", func() bool { return len(e.plat.Notifies()) == 1 })
	if p := e.notifyTexts()[0]; !strings.Contains(p, "codex asks to run a command") || !strings.Contains(p, approvalCommand) {
		t.Fatalf("prompt %q", p)
	}
	e.plat.Enqueue(moleculetest.CanvasMessage("/approve"))
	d.waitPlatform("the answer and the reply", func() bool { return len(e.plat.Notifies()) == 3 })
	all := strings.Join(e.notifyTexts(), "\n---\n")
	if !strings.Contains(all, "approved ") || !strings.Contains(all, "Process exited with code 0") {
		t.Fatalf("notifies:\n%s", all)
	}
	d.waitUntil("both rows acknowledged", func() bool { return d.bridgeStats().Unacked == 0 })
}
