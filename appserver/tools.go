package appserver

import (
	"context"
	"encoding/json"

	"github.com/sourcegraph/jsonrpc2"
	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// ToolCall is one call of a client-defined tool, as codex sent it in item/tool/call.
type ToolCall struct {
	ThreadID, TurnID, CallID string
	Tool                     string
	// Arguments are the call's arguments as the model wrote them (JSON; not validated).
	Arguments json.RawMessage
}

// ToolResult is the answer to a ToolCall: Text is what the model reads; OK false tells it the
// call failed.
type ToolResult struct {
	Text string
	OK   bool
}

// ToolHandler answers the turn's client-defined tool calls. ctx ends with the turn.
type ToolHandler func(ctx context.Context, call ToolCall) ToolResult

// callTool answers item/tool/call. The call goes to the handler of the running turn of its
// thread, on a goroutine of its own (the handler may read files while the dispatcher goes on);
// a call for no running turn, or a turn without a handler, is answered as failed, so codex
// never waits for an answer nobody gives. It runs on the dispatcher.
func (c *Client) callTool(req *jsonrpc2.Request, log *zap.Logger) {
	var p protocol.DynamicToolCallParams
	if req.Params != nil {
		_ = json.Unmarshal(*req.Params, &p)
	}
	t := c.turnOf(p.ThreadID)
	var (
		handler ToolHandler
		ctx     context.Context
	)
	if t != nil && p.ThreadID != "" {
		t.mu.Lock()
		handler, ctx = t.callTool, t.askCtx
		t.mu.Unlock()
	}
	if handler == nil {
		c.replyTool(req, log, ToolResult{Text: "tool " + p.Tool + " is not available for this message"})
		return
	}
	call := ToolCall{ThreadID: p.ThreadID, TurnID: p.TurnID, CallID: p.CallID, Tool: p.Tool, Arguments: p.Arguments}
	// The dispatcher is in wg while it runs, so Add cannot race with Close's Wait.
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.replyTool(req, log, handler(ctx, call))
	}()
}

func (c *Client) replyTool(req *jsonrpc2.Request, log *zap.Logger, r ToolResult) {
	res := protocol.DynamicToolCallResponse{Success: r.OK,
		ContentItems: []protocol.DynamicToolContent{{Type: "inputText", Text: r.Text}}}
	log.Info("client-defined tool answered", zap.Bool("ok", r.OK))
	if err := c.conn.Reply(context.Background(), req.ID, res); err != nil {
		log.Debug("reply to server request", zap.Error(err))
	}
}
