package platform

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// State is what GET /workspaces/{ws}/state says.
type State int

const (
	StateUnknown State = iota // no answer that says anything (failure, no route)
	StateRunning
	StatePaused
	StateDeleted
	StateRefused // 401: the token was refused
)

// workspaceState asks GET /workspaces/{ws}/state, with bearer instead of the workspace token
// when bearer is set.
func (c *Client) WorkspaceState(ctx context.Context, bearer string) (State, error) {
	body, err := c.do(ctx, request{op: "workspace state", method: http.MethodGet, path: "/workspaces/" + c.ws + "/state", bearer: bearer})
	var he *HTTPError
	switch {
	case errors.As(err, &he) && he.Status == http.StatusUnauthorized:
		return StateRefused, err
	case errors.As(err, &he) && he.Status == http.StatusNotFound:
		var gone struct {
			Deleted bool `json:"deleted"`
		}
		if json.Unmarshal(body, &gone) == nil && gone.Deleted {
			return StateDeleted, nil
		}
		return StateUnknown, err
	case err != nil:
		return StateUnknown, err
	}
	var st struct {
		Status  string `json:"status"`
		Paused  bool   `json:"paused"`
		Deleted bool   `json:"deleted"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return StateUnknown, fmt.Errorf("workspace state: %w", err)
	}
	switch {
	case st.Deleted || st.Status == "removed":
		return StateDeleted, nil
	case st.Paused || st.Status == "paused":
		return StatePaused, nil
	}
	return StateRunning, nil
}

// chatHistoryHas reports whether GET /workspaces/{ws}/chat-history lists a canvas row created at
// or before at: false means the New-session marker moved past at. before_ts is strict and the
// platform stores microseconds, so asking for rows before at+1µs includes the row made at at.
func (c *Client) ChatHistoryHas(ctx context.Context, at time.Time) (bool, error) {
	q := url.Values{"limit": {"1"}, "before_ts": {at.Add(time.Microsecond).UTC().Format(time.RFC3339Nano)}}
	body, err := c.do(ctx, request{op: "chat-history", method: http.MethodGet, path: "/workspaces/" + c.ws + "/chat-history", query: q})
	if err != nil {
		return false, err
	}
	var page struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		return false, fmt.Errorf("chat-history: answer is not a page of messages: %w", err)
	}
	return len(page.Messages) > 0, nil
}

// agentLog posts one agent_log row, as the runtime's tool trace does:
// POST /workspaces/{ws}/activity {"activity_type":"agent_log","source_id":ws,"target_id":ws,
// "summary","status","method"} (activity.go Report: a foreign source_id is refused).
func (c *Client) AgentLog(ctx context.Context, timeout time.Duration, method, summary, status string) error {
	_, err := c.do(ctx, request{op: "tool chip", method: http.MethodPost,
		path: "/workspaces/" + c.ws + "/activity", timeout: timeout,
		body: map[string]string{"activity_type": "agent_log", "source_id": c.ws, "target_id": c.ws,
			"summary": summary, "status": status, "method": method}})
	return err
}
