package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/supervisor"
)

func TestLocalInbox(t *testing.T) {
	t.Parallel()
	a := chattest.NewAnswerer(func(_ context.Context, key, text string) (supervisor.Reply, error) {
		switch text {
		case "fail":
			return supervisor.Reply{ChatKey: key, ThreadID: "th", TurnID: "tu", Status: "failed", Error: "model 500", Duration: time.Second}, nil
		case "busy":
			return supervisor.Reply{}, supervisor.ErrQueueFull
		case "noslot":
			return supervisor.Reply{}, fmt.Errorf("wait: %w", supervisor.ErrNoSlot)
		case "closed":
			return supervisor.Reply{}, supervisor.ErrClosed
		case "wedge":
			return supervisor.Reply{}, &supervisor.WatchdogError{ChatKey: key, Watchdog: supervisor.WatchdogTurn, Err: errors.New("x")}
		case "loop":
			return supervisor.Reply{}, &supervisor.CrashLoopError{ChatKey: key, Failures: 3, RetryAt: time.Now().Add(90 * time.Second), Err: errors.New("x")}
		case "auth":
			return supervisor.Reply{}, authErr
		case "other":
			return supervisor.Reply{}, errors.New("boom")
		}
		return chattest.EchoReply(key, text), nil
	})
	h, err := New(Config{Answerer: a, MaxTextBytes: 300})
	must(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()

	tests := []struct {
		name, method, path, body string
		status                   int
		has                      string // in the body
		retryAfter               bool
	}{
		{"answer", "POST", "/v1/chats/canvas:ws-1/messages", `{"text":"hi"}`, 200, `"text":"echo: hi","chat_key":"canvas:ws-1","thread_id":"thread-canvas:ws-1","turn_id":"turn-1","status":"completed","duration_ms":42`, false},
		{"failed turn", "POST", "/v1/chats/k/messages", `{"text":"fail"}`, 200, `"text":"codex failed (status failed): model 500","chat_key":"k","thread_id":"th","turn_id":"tu","status":"failed","duration_ms":1000,"error":"model 500"`, false},
		{"invalid json", "POST", "/v1/chats/k/messages", `{"text":`, 400, `"error":"request body must be a JSON object`, false},
		{"not an object", "POST", "/v1/chats/k/messages", `"hi"`, 400, `"error"`, false},
		{"empty text", "POST", "/v1/chats/k/messages", `{"text":"  "}`, 400, `"error":"text is empty"`, false},
		{"missing text", "POST", "/v1/chats/k/messages", `{}`, 400, `"error":"text is empty"`, false},
		{"bad chat key", "POST", "/v1/chats/bad%20key/messages", `{"text":"x"}`, 400, `invalid chat key`, false},
		{"chat key too long", "POST", "/v1/chats/" + strings.Repeat("k", 201) + "/messages", `{"text":"x"}`, 400, `invalid chat key`, false},
		{"text too long", "POST", "/v1/chats/k/messages", `{"text":"` + strings.Repeat("x", 301) + `"}`, 413, `text is 301 bytes; the limit is 300`, false},
		{"body too large", "POST", "/v1/chats/k/messages", `{"text":"` + strings.Repeat("x", 6000) + `"}`, 413, `request body exceeds`, false},
		{"wrong method", "GET", "/v1/chats/k/messages", ``, 405, `"error":"method GET not allowed; use POST"`, false},
		{"busy", "POST", "/v1/chats/k/messages", `{"text":"busy"}`, 503, `try again shortly`, true},
		{"no slot", "POST", "/v1/chats/k/messages", `{"text":"noslot"}`, 503, `try again shortly`, true},
		{"closed", "POST", "/v1/chats/k/messages", `{"text":"closed"}`, 503, `shutting down`, true},
		{"watchdog", "POST", "/v1/chats/k/messages", `{"text":"wedge"}`, 504, `"watchdog":"turn_deadline"`, false},
		{"crash loop", "POST", "/v1/chats/k/messages", `{"text":"loop"}`, 502, `3 failures in a row`, true},
		{"not logged in", "POST", "/v1/chats/k/messages", `{"text":"auth"}`, 502, "codex login", false},
		{"other error", "POST", "/v1/chats/k/messages", `{"text":"other"}`, 500, `codex could not answer: boom`, false},
		{"healthz", "GET", "/v1/healthz", ``, 200, `"status":"ok"`, false},
		{"healthz wrong method", "POST", "/v1/healthz", ``, 405, `"error"`, false},
		{"unknown path", "GET", "/nope", ``, 404, `"error":"no such endpoint: /nope"`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
			must(t, err)
			if tc.method == "POST" {
				req.Header.Set("Content-Type", "application/json")
			}
			resp, err := srv.Client().Do(req)
			must(t, err)
			defer resp.Body.Close()
			var raw json.RawMessage
			if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
				t.Fatalf("body is not JSON: %v", err)
			}
			if resp.StatusCode != tc.status {
				t.Errorf("status = %d, want %d (%s)", resp.StatusCode, tc.status, raw)
			}
			if !strings.Contains(string(raw), tc.has) {
				t.Errorf("body = %s, want it to contain %s", raw, tc.has)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("content type %q", ct)
			}
			if got := resp.Header.Get("Retry-After") != ""; got != tc.retryAfter {
				t.Errorf("Retry-After present = %v, want %v", got, tc.retryAfter)
			}
		})
	}
	if h := (Config{}); h.Answerer == nil {
		if _, err := New(h); err == nil {
			t.Error("New without answerer: no error")
		}
	}
}

// The local inbox runs different chats in parallel (it calls Submit directly; the supervisor
// orders turns within a chat).
func TestLocalInboxParallelChats(t *testing.T) {
	t.Parallel()
	var a *chattest.Answerer
	a = chattest.NewAnswerer(func(ctx context.Context, key, text string) (supervisor.Reply, error) {
		if err := a.WaitFor(ctx, func() bool { _, most, _, _ := a.Snapshot(); return most >= 3 }); err != nil {
			return supervisor.Reply{}, err
		}
		return chattest.EchoReply(key, text), nil
	})
	h, err := New(Config{Answerer: a})
	must(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	ctx := waitCtx(t)
	errs := make(chan error, 3)
	for i := range 3 {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, "POST", fmt.Sprintf("%s/v1/chats/c%d/messages", srv.URL, i), strings.NewReader(`{"text":"x"}`))
			req.Header.Set("Content-Type", "application/json")
			resp, err := srv.Client().Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != 200 {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			errs <- err
		}()
	}
	for range 3 {
		must(t, <-errs)
	}
}

// An answer carries the turn's duration and the daemon's to the microsecond in Server-Timing:
// duration_ms is whole milliseconds, too coarse for what the daemon adds to a turn.
func TestLocalInboxServerTiming(t *testing.T) {
	t.Parallel()
	a := chattest.NewAnswerer(func(ctx context.Context, key, text string) (supervisor.Reply, error) {
		if text == "boom" {
			return supervisor.Reply{}, errors.New("boom")
		}
		r := chattest.EchoReply(key, text)
		r.Duration = 41*time.Millisecond + 237*time.Microsecond + 900*time.Nanosecond
		return r, nil
	})
	h, err := New(Config{Answerer: a})
	must(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := srv.Client().Post(srv.URL+"/v1/chats/k/messages", "application/json", strings.NewReader(`{"text":"hi"}`))
	must(t, err)
	defer resp.Body.Close()
	var reply Reply
	must(t, json.NewDecoder(resp.Body).Decode(&reply))
	if reply.DurationMS != 41 {
		t.Errorf("duration_ms = %d, want 41", reply.DurationMS)
	}
	st := resp.Header.Get("Server-Timing")
	var turn, daemon float64
	if n, err := fmt.Sscanf(st, "turn;dur=%g, daemon;dur=%g", &turn, &daemon); n != 2 || err != nil {
		t.Fatalf("Server-Timing = %q: %v", st, err)
	}
	if turn != 41.237 || daemon <= 0 {
		t.Errorf("Server-Timing = %q: turn %v ms (want 41.237), daemon %v ms (want > 0)", st, turn, daemon)
	}

	// No turn answered, no timing.
	resp, err = srv.Client().Post(srv.URL+"/v1/chats/k/messages", "application/json", strings.NewReader(`{"text":"boom"}`))
	must(t, err)
	resp.Body.Close()
	if st := resp.Header.Get("Server-Timing"); resp.StatusCode != http.StatusInternalServerError || st != "" {
		t.Errorf("an error's status %d, Server-Timing %q; want 500 and none", resp.StatusCode, st)
	}
}
