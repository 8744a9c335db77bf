package local

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// sseEvent is one server-sent event.
type sseEvent struct {
	name string
	data map[string]any
}

// readEvent reads the next event from r; io.EOF at the end of the stream.
func readEvent(r *bufio.Reader) (sseEvent, error) {
	var ev sseEvent
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "" && ev.name != "":
			return ev, nil
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev.data); err != nil {
				return ev, fmt.Errorf("event %s: %w", ev.name, err)
			}
		}
	}
}

func postStream(t *testing.T, url, text string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(`{"text":`+fmt.Sprintf("%q", text)+`}`))
	must(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	return resp
}

// TestMessageEventStream: with Accept: text/event-stream the message's turn steps arrive as
// events while the turn runs, and its answer comes last as a reply event; a refusal comes as an
// error event with the plain answer's status; without the header the answer is plain JSON.
func TestMessageEventStream(t *testing.T) {
	t.Parallel()
	g := chattest.NewGate()
	a := chattest.NewAnswerer(func(ctx context.Context, key, text string) (supervisor.Reply, error) {
		if text == "busy" {
			return supervisor.Reply{}, fmt.Errorf("wait: %w", supervisor.ErrNoSlot)
		}
		if p := supervisor.ProgressFrom(ctx); p != nil {
			p(supervisor.TurnProgress{Kind: supervisor.ProgressTurnStarted, TurnID: "turn-1"})
			p(supervisor.TurnProgress{Kind: supervisor.ProgressItemStarted, TurnID: "turn-1", ItemType: "commandExecution", Summary: `running "npm test"`})
		}
		_ = g.Wait(context.Background())
		if p := supervisor.ProgressFrom(ctx); p != nil {
			p(supervisor.TurnProgress{Kind: supervisor.ProgressDelta, TurnID: "turn-1", Delta: "echo"})
		}
		return chattest.EchoReply(key, text), nil
	})
	h, err := New(Config{Answerer: a, Controls: &chattest.Controls{}})
	must(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()

	resp := postStream(t, srv.URL+"/v1/chats/k/messages", "hi")
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("status %d, content type %q", resp.StatusCode, ct)
	}
	r := bufio.NewReader(resp.Body)
	// Both steps arrive while the turn is still held: they are streamed, not sent at the end.
	for _, want := range []string{"turn_started", "item_started"} {
		ev, err := readEvent(r)
		must(t, err)
		if ev.name != want || ev.data["kind"] != want || ev.data["turn_id"] != "turn-1" {
			t.Fatalf("event %+v, want %s", ev, want)
		}
		if want == "item_started" && ev.data["summary"] != `running "npm test"` {
			t.Errorf("item summary %v", ev.data["summary"])
		}
	}
	g.Open()
	var names []string
	var last sseEvent
	for {
		ev, err := readEvent(r)
		if err == io.EOF {
			break
		}
		must(t, err)
		names = append(names, ev.name)
		last = ev
	}
	if strings.Join(names, ",") != "delta,reply" || last.data["text"] != "echo: hi" || last.data["status"] != "completed" ||
		last.data["thread_id"] != "thread-k" {
		t.Errorf("events %v, last %+v", names, last)
	}

	// A refusal is an error event carrying the status and Retry-After a plain request gets.
	resp2 := postStream(t, srv.URL+"/v1/chats/k/messages", "busy")
	defer resp2.Body.Close()
	ev, err := readEvent(bufio.NewReader(resp2.Body))
	must(t, err)
	if ev.name != EventError || ev.data["http_status"] != float64(503) || ev.data["retry_after"] != float64(5) || ev.data["error"] == nil {
		t.Errorf("busy: %+v", ev)
	}

	// A chat command is answered as a reply event too.
	resp3 := postStream(t, srv.URL+"/v1/chats/k/messages", "/help")
	defer resp3.Body.Close()
	ev, err = readEvent(bufio.NewReader(resp3.Body))
	must(t, err)
	if ev.name != EventReply || ev.data["status"] != StatusCommand {
		t.Errorf("command: %+v", ev)
	}

	// Without the header: one JSON answer, as before.
	plain, err := http.Post(srv.URL+"/v1/chats/k/messages", "application/json", strings.NewReader(`{"text":"plain"}`))
	must(t, err)
	defer plain.Body.Close()
	body, _ := io.ReadAll(plain.Body)
	if ct := plain.Header.Get("Content-Type"); plain.StatusCode != 200 || !strings.HasPrefix(ct, "application/json") || !strings.Contains(string(body), `"text":"echo: plain"`) {
		t.Errorf("plain answer: %d %q %s", plain.StatusCode, ct, body)
	}
}
