package mockmodel

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// sseEvent is one server-sent event of the mock's stream.
type sseEvent struct {
	Event string
	Data  map[string]any
}

// readSSE reads events until EOF or error; the error is returned with what was read.
func readSSE(r io.Reader) ([]sseEvent, error) {
	var events []sseEvent
	br := bufio.NewReader(r)
	var cur sseEvent
	for {
		line, err := br.ReadString('\n')
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			cur.Event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if jerr := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.Data); jerr != nil {
				return events, jerr
			}
		case line == "" && cur.Event != "":
			events = append(events, cur)
			cur = sseEvent{}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return events, nil
			}
			return events, err
		}
	}
}

// checkMockLeaks fails the test if it leaves goroutines behind. It runs as a cleanup registered
// first, so after the mock's Close.
func checkMockLeaks(t *testing.T) {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

func newTestMock(t *testing.T, cfg Config) *Model {
	t.Helper()
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return m
}

// inputMsg builds a Responses API message input item.
func inputMsg(role, text string) map[string]any {
	partType := "input_text"
	if role == "assistant" {
		partType = "output_text"
	}
	return map[string]any{"type": "message", "role": role,
		"content": []any{map[string]any{"type": partType, "text": text}}}
}

func toolOutputItem(callID, out string) map[string]any {
	return map[string]any{"type": "function_call_output", "call_id": callID, "output": out}
}

// postResponses sends a /v1/responses request with the given input items. The transport keeps no idle
// connections so goleak sees no client goroutines afterwards.
func postResponses(ctx context.Context, t *testing.T, m *Model, input ...map[string]any) (*http.Response, error) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"model": "mock-model", "stream": true, "input": input})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.URL()+"/responses", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	return client.Do(req)
}

// postResponsesWith is postResponses through client.
func postResponsesWith(ctx context.Context, t *testing.T, client *http.Client, m *Model, input ...map[string]any) (*http.Response, error) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"model": "mock-model", "stream": true, "input": input})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.URL()+"/responses", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return client.Do(req)
}

// codexPrefixItems is what codex 0.169.0 puts in front of the user's first message (see the
// comment on isCodexContext): developer instructions, AGENTS.md, environment context.
func codexPrefixItems() []map[string]any {
	return []map[string]any{
		inputMsg("developer", "You are a coding agent running in the Codex CLI"),
		{"type": "message", "role": "user", "content": []any{
			map[string]any{"type": "input_text", "text": "# AGENTS.md instructions for /w\n\n<INSTRUCTIONS>\nBe terse.\n</INSTRUCTIONS>"},
			map[string]any{"type": "input_text", "text": "<environment_context>\n  <cwd>/w</cwd>\n</environment_context>"},
		}},
		inputMsg("user", "<environment_context>\n  <cwd>/w</cwd>\n</environment_context>"),
	}
}

func TestMockModelDefaultReplyCountsUserTurns(t *testing.T) {
	checkMockLeaks(t)
	m := newTestMock(t, Config{})
	input := append(codexPrefixItems(),
		inputMsg("user", "hello"),
		inputMsg("assistant", "reply #1: hello"),
		inputMsg("user", "again"))
	resp, err := postResponses(t.Context(), t, m, input...)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	events, err := readSSE(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range events {
		names = append(names, e.Event)
		if e.Data["type"] != e.Event {
			t.Errorf("event %q carries type %v", e.Event, e.Data["type"])
		}
	}
	want := []string{"response.created", "response.output_item.done", "response.completed"}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("events %v, want %v", names, want)
	}
	item := events[1].Data["item"].(map[string]any)
	text := item["content"].([]any)[0].(map[string]any)["text"]
	if item["type"] != "message" || item["role"] != "assistant" || text != "reply #2: again" {
		t.Errorf("item = %v", item)
	}
	usage := events[2].Data["response"].(map[string]any)["usage"].(map[string]any)
	// One input token per input item, one output token per word.
	if usage["input_tokens"] != float64(len(input)) || usage["output_tokens"] != float64(3) ||
		usage["total_tokens"] != float64(len(input)+3) {
		t.Errorf("usage = %v", usage)
	}

	reqs := m.Requests()
	if len(reqs) != 1 || m.RequestCount() != 1 {
		t.Fatalf("requests = %d", len(reqs))
	}
	r := reqs[0]
	if r.N != 1 || !reflect.DeepEqual(r.UserTexts, []string{"hello", "again"}) || r.LastUserText != "again" ||
		r.HasToolOutput || len(r.Input) != len(input) || len(r.Raw) == 0 {
		t.Errorf("request = %+v", r)
	}
	if u := m.Unhandled(); len(u) != 0 {
		t.Errorf("unhandled = %v", u)
	}
}

func TestParseModelRequest(t *testing.T) {
	tests := []struct {
		name     string
		input    []map[string]any
		users    []string
		hasTool  bool
		toolText string
		images   []Image
	}{
		{name: "empty"},
		{name: "codex context only", input: codexPrefixItems()},
		{name: "first message", input: append(codexPrefixItems(), inputMsg("user", "hi")), users: []string{"hi"}},
		{
			name:  "string content",
			input: []map[string]any{{"type": "message", "role": "user", "content": "plain"}},
			users: []string{"plain"},
		},
		{
			name:  "turn_aborted marker is codex's",
			input: []map[string]any{inputMsg("user", "a"), inputMsg("user", "<turn_aborted>\nx\n</turn_aborted>"), inputMsg("user", "b")},
			users: []string{"a", "b"},
		},
		{
			name: "tool follow-up",
			input: []map[string]any{inputMsg("user", "SHELL"),
				{"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
				toolOutputItem("c1", "shell-ran\n")},
			users: []string{"SHELL"}, hasTool: true, toolText: "shell-ran\n",
		},
		{
			name: "structured tool output",
			input: []map[string]any{inputMsg("user", "SHELL"), {"type": "function_call_output", "call_id": "c1",
				"output": []any{map[string]any{"type": "input_text", "text": "a"}, map[string]any{"type": "input_text", "text": "b"}}}},
			users: []string{"SHELL"}, hasTool: true, toolText: "ab",
		},
		{
			name: "images of user messages",
			input: []map[string]any{inputMsg("user", "a"), {"type": "message", "role": "user", "content": []any{
				map[string]any{"type": "input_text", "text": "look"},
				map[string]any{"type": "input_image", "image_url": "data:image/png;base64,AAAA"},
				map[string]any{"type": "input_image", "image_url": "https://x/y.png", "detail": "high"}}}},
			users:  []string{"a", "look"},
			images: []Image{{Message: 1, URL: "data:image/png;base64,AAAA"}, {Message: 1, URL: "https://x/y.png", Detail: "high"}},
		},
		{
			name: "tool output of an earlier turn does not count",
			input: []map[string]any{inputMsg("user", "SHELL"), toolOutputItem("c1", "old"),
				inputMsg("assistant", "tool said: old"), inputMsg("user", "next")},
			users: []string{"SHELL", "next"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, err := json.Marshal(map[string]any{"input": tt.input})
			if err != nil {
				t.Fatal(err)
			}
			req, err := parseRequest(body)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(req.UserTexts, tt.users) || req.HasToolOutput != tt.hasTool || req.ToolOutput != tt.toolText {
				t.Errorf("got users=%q tool=%v %q, want users=%q tool=%v %q",
					req.UserTexts, req.HasToolOutput, req.ToolOutput, tt.users, tt.hasTool, tt.toolText)
			}
			if !reflect.DeepEqual(req.Images, tt.images) {
				t.Errorf("images = %+v, want %+v", req.Images, tt.images)
			}
			wantLast := ""
			if len(tt.users) > 0 {
				wantLast = tt.users[len(tt.users)-1]
			}
			if req.LastUserText != wantLast {
				t.Errorf("last = %q, want %q", req.LastUserText, wantLast)
			}
		})
	}
	if _, err := parseRequest([]byte("{")); err == nil {
		t.Error("bad JSON accepted")
	}
}

func TestDefaultScript(t *testing.T) {
	shellArgs := `{"cmd":"echo shell-ran","login":false}`
	tests := []struct {
		name string
		req  Request
		want Reply
	}{
		{"plain", Request{UserTexts: []string{"a", "b"}, LastUserText: "b"}, Reply{Text: "reply #2: b"}},
		{"hang", Request{UserTexts: []string{"HANG now"}, LastUserText: "HANG now"}, Reply{Hang: true}},
		{"fail", Request{UserTexts: []string{"FAIL now"}, LastUserText: "FAIL now"}, Reply{Status: 500}},
		{"shell", Request{UserTexts: []string{"SHELL please"}, LastUserText: "SHELL please"},
			Reply{ToolCall: &ToolCall{Name: "exec_command", Arguments: shellArgs}}},
		{"shell follow-up", Request{UserTexts: []string{"SHELL please"}, LastUserText: "SHELL please",
			HasToolOutput: true, ToolOutput: "shell-ran\n"}, Reply{Text: "tool said: shell-ran\n"}},
		{"slow", Request{UserTexts: []string{"SLOW"}, LastUserText: "SLOW"},
			Reply{Text: "reply #1: SLOW", Latency: SlowLatency}},
		{"no user text", Request{}, Reply{Text: "reply #0: "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DefaultScript(tt.req); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v (tool %+v), want %+v (tool %+v)", got, got.ToolCall, tt.want, tt.want.ToolCall)
			}
		})
	}
}

func TestMockModelFailAndShellOverHTTP(t *testing.T) {
	checkMockLeaks(t)
	m := newTestMock(t, Config{})

	resp, err := postResponses(t.Context(), t, m, inputMsg("user", "FAIL now"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError {
		t.Errorf("FAIL status = %d", resp.StatusCode)
	}

	resp, err = postResponses(t.Context(), t, m, inputMsg("user", "SHELL please"))
	if err != nil {
		t.Fatal(err)
	}
	events, err := readSSE(resp.Body)
	resp.Body.Close()
	if err != nil || len(events) != 3 {
		t.Fatalf("events %v err %v", events, err)
	}
	item := events[1].Data["item"].(map[string]any)
	if item["type"] != "function_call" || item["name"] != "exec_command" || item["call_id"] != "call_2" ||
		!strings.Contains(item["arguments"].(string), ShellCommand) {
		t.Errorf("tool call item = %v", item)
	}
}

func TestMockModelScriptOverridesAndLatency(t *testing.T) {
	checkMockLeaks(t)
	const latency = 30 * time.Millisecond
	var (
		mu   sync.Mutex
		seen []int
	)
	m := newTestMock(t, Config{
		Latency: latency,
		Script: func(req Request) Reply {
			mu.Lock()
			seen = append(seen, req.N)
			mu.Unlock()
			if req.N == 1 {
				return Reply{Status: http.StatusServiceUnavailable}
			}
			return Reply{ToolCall: &ToolCall{CallID: "mine", Name: "custom", Arguments: "{}"}}
		},
	})
	start := time.Now()
	resp, err := postResponses(t.Context(), t, m, inputMsg("user", "hello"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("status = %d", resp.StatusCode)
	}
	if d := time.Since(start); d < latency {
		t.Errorf("answered after %v, before the configured latency %v", d, latency)
	}
	resp, err = postResponses(t.Context(), t, m, inputMsg("user", "hello"))
	if err != nil {
		t.Fatal(err)
	}
	events, err := readSSE(resp.Body)
	resp.Body.Close()
	if err != nil || len(events) != 3 {
		t.Fatalf("events %v err %v", events, err)
	}
	item := events[1].Data["item"].(map[string]any)
	if item["call_id"] != "mine" || item["name"] != "custom" {
		t.Errorf("item = %v", item)
	}
	mu.Lock()
	defer mu.Unlock()
	if !reflect.DeepEqual(seen, []int{1, 2}) {
		t.Errorf("script saw %v", seen)
	}
}

func TestMockModelHangReleasedByClientDisconnect(t *testing.T) {
	checkMockLeaks(t)
	m := newTestMock(t, Config{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	resp, err := postResponses(ctx, t, m, inputMsg("user", "HANG now"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// response.created arrives before the hang.
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "event: response.created\n" {
		t.Fatalf("first line %q err %v", line, err)
	}
	wctx, wcancel := context.WithTimeout(t.Context(), time.Minute) // a hang guard
	defer wcancel()
	if err := m.WaitHung(wctx, 1); err != nil {
		t.Fatal(err)
	}
	if m.Hung() != 1 {
		t.Errorf("Hung() = %d", m.Hung())
	}
	cancel() // the client goes away
	if err := m.WaitIdle(wctx); err != nil {
		t.Fatalf("hung handler not released by the disconnect: %v", err)
	}
}

func TestMockModelCloseReleasesHangAndLatency(t *testing.T) {
	checkMockLeaks(t)
	never := make(chan struct{})
	m, err := New(Config{Script: func(req Request) Reply {
		switch req.LastUserText {
		case "wait":
			return Reply{Text: "late", Latency: time.Hour}
		case "hold":
			return Reply{Text: "held", Hold: never}
		}
		return Reply{Hang: true}
	}})
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"hang", "wait", "hold"}
	errs := make(chan error, len(texts))
	for _, text := range texts {
		go func() {
			resp, err := postResponses(context.Background(), t, m, inputMsg("user", text))
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			errs <- err
		}()
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // a hang guard
	defer cancel()
	if err := m.WaitHung(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := m.WaitRequests(ctx, len(texts)); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- m.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("close: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Close did not return while a stream was hung")
	}
	for range texts {
		<-errs // every client is released; its error (if any) does not matter
	}
	if err := m.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	// A closed mock refuses connections.
	if resp, err := postResponses(t.Context(), t, m, inputMsg("user", "x")); err == nil {
		resp.Body.Close()
		t.Error("request to a closed mock succeeded")
	}
}

// Held requests stay in flight together until the script's barrier opens, then each gets its
// answer; InFlight and MaxInFlight count them.
func TestMockModelHoldAndInFlight(t *testing.T) {
	checkMockLeaks(t)
	const n = 3
	release := make(chan struct{})
	m := newTestMock(t, Config{Script: func(req Request) Reply {
		return Reply{Text: "held " + req.LastUserText, Hold: release}
	}})
	type result struct {
		text string
		err  error
	}
	results := make(chan result, n)
	for i := range n {
		go func() {
			resp, err := postResponses(t.Context(), t, m, inputMsg("user", fmt.Sprint(i)))
			if err != nil {
				results <- result{err: err}
				return
			}
			defer resp.Body.Close()
			events, err := readSSE(resp.Body)
			if err != nil || len(events) != 3 {
				results <- result{err: fmt.Errorf("events %v: %v", events, err)}
				return
			}
			item := events[1].Data["item"].(map[string]any)
			text := item["content"].([]any)[0].(map[string]any)["text"].(string)
			results <- result{text: text}
		}()
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // a hang guard
	defer cancel()
	if err := m.wait(ctx, func() bool { return m.answering == n }, "held requests"); err != nil {
		t.Fatal(err)
	}
	if got := m.InFlight(); got != n {
		t.Fatalf("InFlight() = %d with %d requests held, want %d", got, n, n)
	}
	select {
	case r := <-results:
		t.Fatalf("a held request was answered before the release: %+v", r)
	default:
	}
	close(release)
	var got []string
	for range n {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		got = append(got, r.text)
	}
	slices.Sort(got)
	if want := []string{"held 0", "held 1", "held 2"}; !slices.Equal(got, want) {
		t.Errorf("answers = %q, want %q", got, want)
	}
	if err := m.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	if m.InFlight() != 0 || m.MaxInFlight() != n {
		t.Errorf("InFlight() = %d, MaxInFlight() = %d after the answers; want 0 and %d", m.InFlight(), m.MaxInFlight(), n)
	}
}

func TestMockModelWaitHonoursContext(t *testing.T) {
	m := newTestMock(t, Config{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := m.WaitHung(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitHung on a cancelled context = %v", err)
	}
}

func TestMockModelUnhandledPaths(t *testing.T) {
	checkMockLeaks(t)
	m := newTestMock(t, Config{})
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(m.URL() + "/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("status = %d", resp.StatusCode)
	}
	if got := m.Unhandled(); !reflect.DeepEqual(got, []string{"GET /v1/models"}) {
		t.Errorf("unhandled = %v", got)
	}
	if m.RequestCount() != 0 {
		t.Errorf("request count = %d", m.RequestCount())
	}
}

func TestWriteCodexHome(t *testing.T) {
	m := newTestMock(t, Config{})
	dir := t.TempDir()
	if err := m.WriteCodexHome(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`model = "mock-model"`, `model_provider = "mock"`, "[model_providers.mock]",
		`base_url = "` + m.URL() + `"`, `wire_api = "responses"`,
		"request_max_retries = 0", "stream_max_retries = 0",
		"[analytics]\nenabled = false", "plugins = false", "shell_snapshot = false",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("config.toml lacks %q:\n%s", want, b)
		}
	}
	if err := m.WriteCodexHome(filepath.Join(dir, "missing")); err == nil {
		t.Error("writing into a missing directory succeeded")
	}
}

// TestMockModelMaxInFlight holds three responses open at once and checks the high-water mark:
// it counts model requests being answered together, keeps the peak after they finish, leaves out
// requests the mock does not serve, and starts again from the current count on reset.
func TestMockModelMaxInFlight(t *testing.T) {
	checkMockLeaks(t)
	release := make(chan struct{})
	m := newTestMock(t, Config{Script: func(req Request) Reply {
		if req.LastUserText == "hold" {
			<-release
		}
		return Reply{Text: "done"}
	}})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // a hang guard
	defer cancel()
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			resp, err := postResponses(ctx, t, m, inputMsg("user", "hold"))
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			errs <- err
		}()
	}
	if err := m.WaitRequests(ctx, 3); err != nil {
		close(release)
		t.Fatal(err)
	}
	// A request the mock does not serve is no model request.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	if resp, err := client.Get(m.URL() + "/models"); err == nil {
		resp.Body.Close()
	}
	if got, peak := m.InFlight(), m.MaxInFlight(); got != 3 || peak != 3 {
		t.Errorf("while three are held: InFlight %d, MaxInFlight %d; want 3, 3", got, peak)
	}
	close(release)
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := m.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	if got, peak := m.InFlight(), m.MaxInFlight(); got != 0 || peak != 3 {
		t.Errorf("after they finished: InFlight %d, MaxInFlight %d; want 0, 3", got, peak)
	}
	if prev := m.ResetMaxInFlight(); prev != 3 {
		t.Errorf("ResetMaxInFlight returned %d, want the old mark 3", prev)
	}
	if peak := m.MaxInFlight(); peak != 0 {
		t.Errorf("MaxInFlight after a reset with nothing in flight = %d, want 0", peak)
	}
	resp, err := postResponses(ctx, t, m, inputMsg("user", "one"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if peak := m.MaxInFlight(); peak != 1 {
		t.Errorf("MaxInFlight after one request alone = %d, want 1", peak)
	}
}

// Config.Addr chooses the loopback address (a fixed port for a standalone mock); an address
// beyond loopback is refused.
func TestMockModelAddr(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	m := newTestMock(t, Config{Addr: addr})
	if m.URL() != "http://"+addr+"/v1" {
		t.Errorf("URL %s, want http://%s/v1", m.URL(), addr)
	}
	if !strings.Contains(m.CodexConfig(), `base_url = "http://`+addr+`/v1"`) {
		t.Errorf("config:\n%s", m.CodexConfig())
	}
	for _, bad := range []string{"0.0.0.0:0", ":0", "192.0.2.1:0", "nonsense"} {
		if m, err := New(Config{Addr: bad}); err == nil {
			m.Close()
			t.Errorf("Addr %q accepted", bad)
		}
	}
}
