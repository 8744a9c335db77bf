package mockmodel

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// emitter writes one response's events on a transport: SSE events over HTTP, or text messages
// over a websocket.
type emitter interface {
	// event sends one event (its "type" field names it) and reports false when the client is
	// gone.
	event(data map[string]any) bool
	// status answers with an HTTP error status instead of a stream.
	status(code int)
	// usageLimit answers the account's usage limit instead of a stream; rateLimits reports
	// rate limits before the first event (limits.go).
	usageLimit(reply Reply)
	rateLimits(rl *RateLimits)
}

// answer records req, runs the script, and emits the reply. It returns the response's id, the
// output items sent, and whether the response completed.
func (m *Model) answer(ctx context.Context, req Request, e emitter) (string, []map[string]any, bool) {
	m.mu.Lock()
	req.N = len(m.requests) + 1
	m.requests = append(m.requests, req)
	m.timeline = append(m.timeline, Event{Kind: EventRequest, At: time.Now(), Conn: req.Conn, Request: req.N})
	m.answering++
	m.peak = max(m.peak, m.answering)
	m.notifyLocked()
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.answering--
		m.notifyLocked()
		m.mu.Unlock()
	}()

	script := m.cfg.Script
	if script == nil {
		script = DefaultScript
	}
	reply := script(req)

	if !m.pause(ctx, m.cfg.Latency+reply.Latency) || !m.hold(ctx, reply.Hold) {
		return "", nil, false
	}
	if reply.UsageLimit != nil {
		e.usageLimit(reply)
		return "", nil, false
	}
	if reply.Status != 0 && reply.Status != http.StatusOK {
		e.status(reply.Status)
		return "", nil, false
	}
	m.record(EventFirstByte, req.Conn, req.N)
	e.rateLimits(reply.RateLimits)
	respID := "resp_" + strconv.Itoa(req.N)
	if !e.event(map[string]any{
		"type":     "response.created",
		"response": map[string]any{"id": respID},
	}) {
		return "", nil, false
	}
	if reply.Hang {
		m.mu.Lock()
		m.hung++
		m.notifyLocked()
		m.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-m.closing:
		}
		return "", nil, false
	}

	items, outputTokens := outputItems(req, reply)
	for _, item := range items {
		if !e.event(map[string]any{
			"type": "response.output_item.done",
			"item": item,
		}) {
			return "", nil, false
		}
	}
	if !m.pause(ctx, reply.FinishLatency) {
		return "", nil, false
	}
	// Token counts are small and deterministic so tests can assert on them: one input token
	// per input item, one output token per word.
	inputTokens := len(req.Input)
	ok := e.event(withUsage(completedEvent(respID, inputTokens, outputTokens), reply.Usage))
	return respID, items, ok
}

// completedEvent is the response.completed event of response id with this usage.
func completedEvent(id string, inputTokens, outputTokens int) map[string]any {
	return map[string]any{
		"type": "response.completed",
		"response": map[string]any{
			"id": id,
			"usage": map[string]any{
				"input_tokens":          inputTokens,
				"input_tokens_details":  nil,
				"output_tokens":         outputTokens,
				"output_tokens_details": nil,
				"total_tokens":          inputTokens + outputTokens,
			},
		},
	}
}

// outputItems are the output items of a reply to req, and its output token count.
func outputItems(req Request, reply Reply) ([]map[string]any, int) {
	var items []map[string]any
	outputTokens := 1
	calls := reply.ToolCalls
	if reply.ToolCall != nil {
		calls = []ToolCall{*reply.ToolCall}
	}
	for i, tc := range calls {
		callID, name, id := tc.CallID, tc.Name, "fc_"+strconv.Itoa(req.N)
		if i > 0 {
			id += "_" + strconv.Itoa(i)
		}
		if callID == "" {
			callID = "call_" + strconv.Itoa(req.N)
			if len(calls) > 1 {
				callID += "_" + strconv.Itoa(i)
			}
		}
		if name == "" {
			name = "exec_command"
		}
		items = append(items, map[string]any{
			"type":      "function_call",
			"id":        id,
			"call_id":   callID,
			"name":      name,
			"arguments": tc.Arguments,
		})
	}
	if len(calls) == 0 {
		items = append(items, map[string]any{
			"type": "message",
			"role": "assistant",
			"id":   "msg_" + strconv.Itoa(req.N),
			"content": []any{
				map[string]any{"type": "output_text", "text": reply.Text},
			},
		})
		outputTokens = max(1, len(strings.Fields(reply.Text)))
	}
	return items, outputTokens
}

// sseEmitter writes a response as HTTP server-sent events.
type sseEmitter struct {
	w       http.ResponseWriter
	started bool
}

func (s *sseEmitter) event(data map[string]any) bool {
	if !s.started {
		s.started = true
		s.w.Header().Set("Content-Type", "text/event-stream")
		s.w.Header().Set("Cache-Control", "no-cache")
		s.w.WriteHeader(http.StatusOK)
	}
	b, err := json.Marshal(data)
	if err != nil {
		panic(err) // only our own maps are marshalled here
	}
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", data["type"], b); err != nil {
		return false
	}
	if f, ok := s.w.(http.Flusher); ok {
		f.Flush()
	}
	return true
}

func (s *sseEmitter) status(code int) {
	s.w.Header().Set("Content-Type", "application/json")
	s.w.WriteHeader(code)
	_, _ = fmt.Fprintf(s.w, `{"error":{"message":"mock model: scripted status %d","type":"server_error"}}`, code)
}
