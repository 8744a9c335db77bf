package appserver_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

var echoTool = protocol.DynamicToolSpec{Type: "function", Name: "echo_tool", Description: "Echo the word.",
	InputSchema: json.RawMessage(`{"type":"object","properties":{"word":{"type":"string"}},"required":["word"]}`)}

// toolScript calls echo_tool when the user says CALL, then answers with the tool's output.
func toolScript(req mockmodel.Request) mockmodel.Reply {
	if req.HasToolOutput {
		return mockmodel.Reply{Text: "tool said: " + req.ToolOutput}
	}
	if strings.Contains(req.LastUserText, "CALL") {
		return mockmodel.Reply{ToolCall: &mockmodel.ToolCall{Name: "echo_tool", Arguments: `{"word":"hello"}`}}
	}
	return mockmodel.DefaultScript(req)
}

// A client-defined tool offered on thread/start reaches the running turn's CallTool over the
// child's own JSON-RPC, and its answer reaches the model. A turn without a CallTool answers the
// call as failed, and the turn goes on. A thread resumed in a new child keeps the tool.
func TestRealDynamicToolCall(t *testing.T) {
	noLeaks(t)
	e := newRealEnv(t, mockmodel.Config{Script: toolScript})
	withTool := func(c *appserver.Config) { c.DynamicTools = []protocol.DynamicToolSpec{echoTool} }
	c := e.start(t, withTool)
	ctx := ctxTimeout(t, 2*time.Minute)
	thread, err := c.StartThread(ctx, e.threadOpts("never"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var calls []appserver.ToolCall
	handler := func(_ context.Context, call appserver.ToolCall) appserver.ToolResult {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, call)
		return appserver.ToolResult{OK: true, Text: "echo " + call.Tool}
	}
	res, err := c.RunTurn(ctx, thread, text("CALL it"), appserver.TurnOptions{CallTool: handler})
	if err != nil {
		t.Fatal(err)
	}
	if got := replyOf(res); got != "tool said: echo echo_tool" {
		t.Errorf("reply %q", got)
	}
	if len(calls) != 1 || calls[0].ThreadID != thread || calls[0].TurnID != res.TurnID || string(calls[0].Arguments) != `{"word":"hello"}` {
		t.Errorf("calls %+v", calls)
	}
	res, err = c.RunTurn(ctx, thread, text("CALL again"), appserver.TurnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := replyOf(res); got != "tool said: tool echo_tool is not available for this message" {
		t.Errorf("reply without a handler %q", got)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	c2 := e.start(t, withTool)
	if err := c2.ResumeThread(ctx, thread, e.threadOpts("never")); err != nil {
		t.Fatal(err)
	}
	res, err = c2.RunTurn(ctx, thread, text("CALL after resume"), appserver.TurnOptions{CallTool: handler})
	if err != nil {
		t.Fatal(err)
	}
	if got := replyOf(res); got != "tool said: echo echo_tool" {
		t.Errorf("reply after resume %q (the resumed thread lost the tool?)", got)
	}
}
