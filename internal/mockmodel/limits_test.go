package mockmodel

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A usage limit is answered as the API answers it: 429, the JSON body codex reads resets_at
// from, and the x-codex-* headers of a used-up window.
func TestMockModelUsageLimitOverHTTP(t *testing.T) {
	reset := time.Unix(1795621141, 0)
	m, err := New(Config{Script: func(Request) Reply { return Reply{UsageLimit: &UsageLimit{ResetsAt: reset}} }})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	resp, err := http.Post(m.URL()+"/responses", "application/json", strings.NewReader(`{"input":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var got struct {
		Error struct {
			Type     string `json:"type"`
			PlanType string `json:"plan_type"`
			ResetsAt int64  `json:"resets_at"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &got); err != nil || got.Error.Type != "usage_limit_reached" || got.Error.ResetsAt != reset.Unix() || got.Error.PlanType != "plus" {
		t.Errorf("body %s (%v)", body, err)
	}
	for k, want := range map[string]string{"x-codex-primary-used-percent": "100.0", "x-codex-primary-window-minutes": "300",
		"x-codex-primary-reset-at": "1795621141", "x-codex-active-limit": "codex"} {
		if v := resp.Header.Get(k); v != want {
			t.Errorf("header %s = %q, want %q", k, v, want)
		}
	}
}

// The websocket form wraps the same body, status and headers in an error event.
func TestUsageLimitEvent(t *testing.T) {
	reset := time.Unix(1795621141, 0)
	var ev struct {
		Type    string            `json:"type"`
		Status  int               `json:"status"`
		Error   map[string]any    `json:"error"`
		Headers map[string]string `json:"headers"`
	}
	b := UsageLimitEvent(Reply{UsageLimit: &UsageLimit{ResetsAt: reset}})
	if err := json.Unmarshal(b, &ev); err != nil || ev.Type != "error" || ev.Status != 429 || ev.Error["type"] != "usage_limit_reached" ||
		ev.Headers["x-codex-primary-reset-at"] != "1795621141" {
		t.Errorf("event %s (%v)", b, err)
	}
}
