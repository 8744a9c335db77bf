package supervisor

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/molecule-ai/codex-warm/protocol"
)

// TestStatusShowsActivity: while a turn runs, the chat's status row says what it does now and
// since when: thinking from the start, then the running command from the moment it started;
// once the turn is over the row has no activity.
func TestStatusShowsActivity(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, nil)
		defer shutdown(t, s)
		start := time.Now()
		p := submitAsync(context.Background(), s, "a", "progress:g")
		synctest.Wait()
		row, ok, _ := s.ChatStatus("a")
		if !ok || row.Activity != ActivityThinking || !row.ActivitySince.Equal(start) {
			t.Fatalf("at start: ok %v, activity %q since %v, want thinking since %v", ok, row.Activity, row.ActivitySince, start)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		cmdStart := time.Now()
		time.Sleep(2*time.Minute + 10*time.Second)
		row, _, _ = s.ChatStatus("a")
		if want := `running "npm test"`; row.Activity != want || !row.ActivitySince.Equal(cmdStart) {
			t.Fatalf("during the command: activity %q since %v, want %q since %v", row.Activity, row.ActivitySince, want, cmdStart)
		}
		if time.Since(row.ActivitySince) != 2*time.Minute+10*time.Second {
			t.Errorf("activity age %s", time.Since(row.ActivitySince))
		}
		if acts := s.Activity(); len(acts) != 1 || acts[0] != (ChatActivity{ChatKey: "a", What: row.Activity, Since: cmdStart}) {
			t.Errorf("Activity() = %+v", acts)
		}
		b, _ := json.Marshal(row)
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil || doc["activity"] != `running "npm test"` || doc["activity_since"] == nil {
			t.Errorf("json row %s lacks activity fields", b)
		}
		w.open("g")
		if _, err := p.wait(); err != nil {
			t.Fatal(err)
		}
		if acts := s.Activity(); len(acts) != 0 {
			t.Errorf("Activity() after the turn = %+v", acts)
		}
		row, _, _ = s.ChatStatus("a")
		if row.Activity != "" || !row.ActivitySince.IsZero() {
			t.Errorf("idle chat shows activity %q since %v", row.Activity, row.ActivitySince)
		}
	})
}

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
	if got := describeItem(b); len([]rune(got)) != len(`running ""`)+activityCommandMax {
		t.Errorf("long command not capped: %d runes", len([]rune(got)))
	}
}

// TestActivityWaitingOnApproval: codex's waitingOnApproval flag shows as waiting for approval.
func TestActivityWaitingOnApproval(t *testing.T) {
	t.Parallel()
	a := newActivity(nil)
	b, _ := json.Marshal(map[string]any{"threadId": "t", "status": map[string]any{"type": "active", "activeFlags": []string{protocol.FlagWaitingOnApproval}}})
	a.observe(protocol.Notification{Method: protocol.NotifyThreadStatus, Params: b})
	if what, _ := a.get(); what != ActivityWaiting {
		t.Errorf("activity %q", what)
	}
}

// TestWithProgress: a message submitted with WithProgress sees its turn's steps in order, each
// with a one-line summary, and nothing after Submit returned.
func TestWithProgress(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, nil)
		defer shutdown(t, s)
		var mu sync.Mutex
		var got []string
		ctx := WithProgress(context.Background(), func(p TurnProgress) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, p.Kind+" "+p.TurnID+" "+p.ItemType+" "+p.Summary)
		})
		p := submitAsync(ctx, s, "a", "progress:g")
		synctest.Wait()
		w.open("g")
		if _, err := p.wait(); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		want := []string{
			"turn_started turn-1  ",
			"item_started turn-1 reasoning thinking",
			"item_completed turn-1 reasoning thought",
			`item_started turn-1 commandExecution running "npm test"`,
			`item_completed turn-1 commandExecution ran "npm test" (completed)`,
			"item_started turn-1 agentMessage writing",
		}
		if !slices.Equal(got, want) {
			t.Errorf("progress:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		// Without WithProgress nothing is reported and nothing breaks.
		if _, err := s.Submit(context.Background(), "a", "plain"); err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Errorf("a message without an observer reported steps: %v", got[len(want):])
		}
	})
}

func TestProgressOfNotification(t *testing.T) {
	t.Parallel()
	d, _ := json.Marshal(map[string]any{"threadId": "t", "turnId": "u", "itemId": "i", "delta": "Hel"})
	if p, ok := progressOfNotification(protocol.Notification{Method: protocol.NotifyAgentMessageDelta, Params: d}); !ok ||
		p != (TurnProgress{Kind: ProgressDelta, TurnID: "u", ItemID: "i", Delta: "Hel"}) {
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
	if _, ok := progressOfNotification(protocol.Notification{Method: protocol.NotifyItemStarted, Params: u}); ok {
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
		p, ok := progressOfNotification(protocol.Notification{Method: protocol.NotifyItemCompleted, Params: raw})
		if !ok || p.Kind != ProgressItemCompleted {
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
