package progress

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/internal/protocol"
)

func TestDescribeItem(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		item map[string]any
		want string
	}{
		{map[string]any{"type": "commandExecution", "command": "go test ./..."}, `running "go test ./..."`},
		{map[string]any{"type": "commandExecution", "command": "/bin/bash -lc 'npm test'"}, `running "npm test"`},
		{map[string]any{"type": "commandExecution", "command": `sh -c 'a' 'b'`}, `running "sh -c 'a' 'b'"`},
		{map[string]any{"type": "fileChange", "changes": []map[string]any{{"path": "a"}, {"path": "b"}}}, "editing 2 files"},
		{map[string]any{"type": "fileChange", "changes": []map[string]any{{"path": "a"}}}, "editing 1 file"},
		{map[string]any{"type": "mcpToolCall", "server": "gh", "tool": "search"}, "calling gh.search"},
		{map[string]any{"type": "dynamicToolCall", "tool": "lookup"}, "calling lookup"},
		{map[string]any{"type": "reasoning"}, "thinking"},
		{map[string]any{"type": "agentMessage"}, "writing"},
		{map[string]any{"type": "userMessage"}, ""},
		{map[string]any{"type": "webSearch"}, "webSearch"},
	} {
		b, _ := json.Marshal(map[string]any{"threadId": "t", "turnId": "u", "item": tc.item})
		if got := describeItem(b); got != tc.want {
			t.Errorf("%v: got %q, want %q", tc.item, got, tc.want)
		}
	}
	long := make([]byte, 200)
	for i := range long {
		long[i] = 'x'
	}
	b, _ := json.Marshal(map[string]any{"item": map[string]any{"type": "commandExecution", "command": string(long)}})
	if got := describeItem(b); len([]rune(got)) != len(`running ""`)+commandMax {
		t.Errorf("long command not capped: %d runes", len([]rune(got)))
	}
}

// TestWaitingOnApproval: codex's waitingOnApproval flag shows as waiting for approval.
func TestWaitingOnApproval(t *testing.T) {
	t.Parallel()
	a := NewActivity(nil)
	b, _ := json.Marshal(map[string]any{"threadId": "t", "status": map[string]any{"type": "active", "activeFlags": []string{protocol.FlagWaitingOnApproval}}})
	a.Observe(protocol.Notification{Method: protocol.NotifyThreadStatus, Params: b})
	if what, _ := a.Get(); what != Waiting {
		t.Errorf("activity %q", what)
	}
}

func TestProgressOfNotification(t *testing.T) {
	t.Parallel()
	d, _ := json.Marshal(map[string]any{"threadId": "t", "turnId": "u", "itemId": "i", "delta": "Hel"})
	if p, ok := Of(protocol.Notification{Method: protocol.NotifyAgentMessageDelta, Params: d}); !ok ||
		p != (Step{Kind: Delta, TurnID: "u", ItemID: "i", Delta: "Hel"}) {
		t.Errorf("delta: %+v %v", p, ok)
	}
	exit := 2
	for _, tc := range []struct {
		item protocol.Item
		want string
	}{
		{protocol.Item{Type: "commandExecution", Command: "/bin/bash -lc 'make'", ExitCode: &exit, Status: "failed"}, `ran "make" (exit 2)`},
		{protocol.Item{Type: "fileChange", Changes: make([]protocol.FileUpdateChange, 3), Status: "completed"}, "edited 3 files (completed)"},
		{protocol.Item{Type: "mcpToolCall", Server: "gh", Tool: "search", Status: "completed"}, "called gh.search (completed)"},
		{protocol.Item{Type: "agentMessage", Text: "Done.\nDetails follow"}, "wrote: Done."},
	} {
		if got := describeDone(tc.item); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.item, got, tc.want)
		}
	}
	u, _ := json.Marshal(map[string]any{"turnId": "u", "item": map[string]any{"type": "userMessage", "id": "m"}})
	if _, ok := Of(protocol.Notification{Method: protocol.NotifyItemStarted, Params: u}); ok {
		t.Error("the user's own message reported as a step")
	}
}

// A completed tool call names its tool, its main argument on one short line, and whether it
// failed; other items name no tool.
func TestProgressToolCall(t *testing.T) {
	t.Parallel()
	zero, two, no := 0, 2, false
	for _, tc := range []struct {
		item               map[string]any
		tool, arg          string
		failed, notAnyTool bool
	}{
		{item: map[string]any{"type": "commandExecution", "command": "/bin/bash -lc 'npm  test\n--watch'", "exitCode": zero, "status": "completed"}, tool: "shell", arg: "npm test --watch"},
		{item: map[string]any{"type": "commandExecution", "command": "make", "exitCode": two, "status": "failed"}, tool: "shell", arg: "make", failed: true},
		{item: map[string]any{"type": "fileChange", "changes": []any{map[string]any{"path": "a.go"}, map[string]any{"path": "b.go"}}, "status": "completed"}, tool: "apply_patch", arg: "a.go, b.go"},
		{item: map[string]any{"type": "mcpToolCall", "server": "gh", "tool": "search", "arguments": map[string]any{"q": "x"}, "status": "completed"}, tool: "gh.search", arg: `{"q":"x"}`},
		{item: map[string]any{"type": "dynamicToolCall", "tool": "send_file", "arguments": map[string]any{"path": "r.pdf"}, "status": "completed", "success": no}, tool: "send_file", arg: `{"path":"r.pdf"}`, failed: true},
		{item: map[string]any{"type": "webSearch", "query": "codex app-server"}, tool: "web_search", arg: "codex app-server"},
		{item: map[string]any{"type": "agentMessage", "text": "hi"}, notAnyTool: true},
		{item: map[string]any{"type": "commandExecution", "command": strings.Repeat("x", 500), "status": "declined"}, tool: "shell", arg: strings.Repeat("x", toolArgMax-1) + "…", failed: true},
	} {
		tc.item["id"] = "i"
		raw, _ := json.Marshal(map[string]any{"turnId": "u", "item": tc.item})
		p, ok := Of(protocol.Notification{Method: protocol.NotifyItemCompleted, Params: raw})
		if !ok || p.Kind != ItemCompleted {
			t.Fatalf("%v: %+v %v", tc.item["type"], p, ok)
		}
		if tc.notAnyTool {
			if p.Tool != "" {
				t.Errorf("%v named tool %q", tc.item["type"], p.Tool)
			}
			continue
		}
		if p.Tool != tc.tool || p.ToolArg != tc.arg || p.Failed != tc.failed {
			t.Errorf("%v: tool %q arg %q failed %v, want %q %q %v", tc.item["type"], p.Tool, p.ToolArg, p.Failed, tc.tool, tc.arg, tc.failed)
		}
	}
}
