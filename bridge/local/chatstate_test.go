package local

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// getChatState GETs /v1/chats/{key} and decodes the answer.
func getChatState(t *testing.T, base, key string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get(base + "/v1/chats/" + key)
	must(t, err)
	defer resp.Body.Close()
	var doc map[string]any
	must(t, json.NewDecoder(resp.Body).Decode(&doc))
	return resp.StatusCode, doc
}

// TestGetChatState: GET /v1/chats/{key} answers the chat's row of the process table with what
// its turn is doing, its queue and its last error; a chat without a child is "none", not 404.
func TestGetChatState(t *testing.T) {
	t.Parallel()
	since := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	chats := &chattest.Controls{RowOK: true, LastErr: "turn failed", Row: supervisor.ChildStatus{ChatKey: "canvas:ws-1", PID: 42,
		State: supervisor.StateBusy, ThreadID: "t1", Turns: 3, Queued: 2, TurnAge: 5 * time.Second,
		Activity: `running "npm test"`, ActivitySince: since}}
	h, err := New(Config{Answerer: chattest.NewAnswerer(nil), Chats: chats})
	must(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()

	status, doc := getChatState(t, srv.URL, "canvas:ws-1")
	want := map[string]any{"chat_key": "canvas:ws-1", "session": true, "state": "busy", "pid": float64(42), "thread_id": "t1",
		"turns": float64(3), "queued": float64(2), "turn_age_ns": float64(5e9), "activity": `running "npm test"`,
		"activity_since": "2026-11-23T12:00:00Z", "last_error": "turn failed"}
	if status != http.StatusOK {
		t.Fatalf("status %d: %v", status, doc)
	}
	for k, v := range want {
		if doc[k] != v {
			t.Errorf("%s = %v, want %v", k, doc[k], v)
		}
	}

	chats.RowOK, chats.LastErr, chats.Row = false, "", supervisor.ChildStatus{Queued: 1}
	status, doc = getChatState(t, srv.URL, "peer:p1")
	if status != http.StatusOK || doc["session"] != false || doc["state"] != "none" || doc["chat_key"] != "peer:p1" ||
		doc["queued"] != float64(1) || doc["activity"] != nil || doc["last_error"] != nil {
		t.Errorf("chat without a session: %d %v", status, doc)
	}

	if status, doc = getChatState(t, srv.URL, "bad%20key"); status != http.StatusBadRequest {
		t.Errorf("bad key: %d %v", status, doc)
	}
	resp, err := http.Post(srv.URL+"/v1/chats/k", "application/json", nil)
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /v1/chats/k: %d, want 405", resp.StatusCode)
	}

	// Without a state source the endpoint says so in JSON.
	h2, err := New(Config{Answerer: chattest.NewAnswerer(nil)})
	must(t, err)
	srv2 := httptest.NewServer(h2)
	defer srv2.Close()
	if status, doc = getChatState(t, srv2.URL, "k"); status != http.StatusNotFound || doc["error"] == nil {
		t.Errorf("no source: %d %v", status, doc)
	}
}
