package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// Two commands the model asks for in one response; each stays off codex's known-safe list.
const (
	firstCommand  = "echo first-ran > /dev/null; echo first-ran"
	secondCommand = "echo second-ran > /dev/null; echo second-ran"
)

// twoCallsScript answers "run both" with two shell tool calls in one response.
func twoCallsScript(req mockmodel.Request) mockmodel.Reply {
	if !req.HasToolOutput && req.LastUserText == "run both" {
		var calls []mockmodel.ToolCall
		for _, c := range []string{firstCommand, secondCommand} {
			args, _ := json.Marshal(map[string]any{"cmd": c, "login": false})
			calls = append(calls, mockmodel.ToolCall{Arguments: string(args)})
		}
		return mockmodel.Reply{ToolCalls: calls}
	}
	return mockmodel.DefaultScript(req)
}

var denyNumber = regexp.MustCompile(`/deny (\d+)\.`)

// Two approvals pending in one chat: each prompt names the number its answer takes; a bare
// /deny asks which and answers neither; /deny N answers the second and says so; with one left, a
// bare /approve answers it and says which it was. Real codex, local inbox.
func TestE2ETwoApprovalsPending(t *testing.T) {
	e := newE2E(t, e2eConfig{Local: true, Script: twoCallsScript})
	d := e.start(approvalArgs(time.Minute)...)
	c := newLocalClient(t, d)
	reply := c.sendAsync("k", "run both")
	d.waitUntil("both approvals to be asked", func() bool { return len(d.logsWith("approval asked in the chat")) == 2 })
	status := c.send("k", "/status").Text
	if n := strings.Count(status, "codex asks to run a command"); n != 2 {
		t.Errorf("/status shows %d of the 2 pending approvals:\n%s", n, status)
	}
	// Each prompt is headed by its number and ends naming it; which command asked first is
	// codex's business.
	var first, second string
	for _, block := range strings.Split(status, "Approval ")[1:] {
		num, _, _ := strings.Cut(block, ":")
		if m := denyNumber.FindStringSubmatch(block); m == nil || m[1] != num {
			t.Errorf("prompt %q does not end with its own /deny %s", block, num)
		}
		switch {
		case strings.Contains(block, firstCommand):
			first = num
		case strings.Contains(block, secondCommand):
			second = num
		}
	}
	if first == "" || second == "" || first == second {
		t.Errorf("the two prompts do not say which answer applies to each:\n%s", status)
	}
	if r := c.send("k", "/deny"); !strings.Contains(r.Text, "say which") || strings.Contains(r.Text, "denied") {
		t.Fatalf("bare /deny with two pending: %q, want it to ask which", r.Text)
	}
	if r := c.send("k", "/deny "+second); !strings.HasPrefix(r.Text, "denied "+second+": ") || !strings.Contains(r.Text, secondCommand) {
		t.Fatalf("/deny %s: %q", second, r.Text)
	}
	if r := c.send("k", "/approve"); !strings.HasPrefix(r.Text, "approved "+first+": ") || !strings.Contains(r.Text, firstCommand) {
		t.Fatalf("bare /approve with one left: %q", r.Text)
	}
	r := <-reply
	if r.Status != "completed" {
		t.Fatalf("reply %+v", r)
	}
	// The model's last request holds both tool outputs: one approved and run, one denied.
	reqs := e.mock.Requests()
	var outputs []string
	for _, item := range reqs[len(reqs)-1].Input {
		var it struct {
			Type   string          `json:"type"`
			Output json.RawMessage `json:"output"`
		}
		if json.Unmarshal(item, &it) == nil && it.Type == "function_call_output" {
			outputs = append(outputs, string(it.Output))
		}
	}
	all := strings.Join(outputs, "\n")
	if len(outputs) != 2 || !strings.Contains(all, "first-ran") || strings.Contains(all, `second-ran\n`) || !strings.Contains(all, "rejected") {
		t.Errorf("want the first command run and the second rejected; tool outputs:\n%s", all)
	}
	if _, ok := c.pendingApproval("k"); ok {
		t.Error("an approval still pending after the turn")
	}
}
