// Package mockmodel is a mock OpenAI Responses API for demos and tests: a server on loopback
// only (127.0.0.1) that the real codex binary can use as its model provider, answering each
// request by a script and recording what it received. It speaks both transports codex has:
// HTTP + SSE (POST /v1/responses) and the Responses websocket (GET /v1/responses upgraded, one
// response.create message per request, previous_response_id chaining), optionally over TLS. WriteCodexHome points a CODEX_HOME at it
// and keeps codex offline. It is not a test double of this project's code, so production
// commands (`supervisor demo`) may link it; test-only doubles live in appserver/appservertest.
package mockmodel

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Config configures a Model.
type Config struct {
	// Addr is the loopback address to listen on, host:port; empty means 127.0.0.1:0 (a free
	// port). A host beyond loopback is refused: the mock answers anyone who reaches it.
	Addr string
	// Latency is added before every response (on top of Reply.Latency).
	Latency time.Duration
	// Script decides the reply to each request. Nil means DefaultScript. It is called from the
	// request's handler goroutine, possibly for several requests at once.
	Script func(req Request) Reply
	// Authorize, when set, decides whether a request's bearer token (the Authorization header
	// without "Bearer ") is good. A refused request is answered 401 with an OpenAI error body,
	// as the real API answers an expired or revoked token, and is not recorded as a request.
	Authorize func(bearer string) bool
	// HTTPOnly serves the Responses API over HTTP + SSE only: websocket upgrades are refused and
	// WriteCodexHome leaves codex on HTTP. By default the mock serves both and codex is told to
	// use the websocket, as it does with the built-in openai provider.
	HTTPOnly bool
	// TLS serves HTTPS (and wss) with a certificate from a CA the mock generates; codex must
	// trust it (SSL_CERT_FILE pointing at the file WriteCA writes).
	TLS bool
	// MaxConnAge, when positive, closes each websocket once it is this old and no response is
	// being answered on it, as the real API closes long-lived connections.
	MaxConnAge time.Duration
}

// Request is one POST /v1/responses as the mock saw it.
type Request struct {
	// N is the 1-based sequence number of the request on this mock.
	N int
	// Input is the request's `input`: the whole conversation so far, one raw item each.
	Input []json.RawMessage
	// UserTexts are the texts of the real user messages in Input, oldest first. User-role
	// messages codex composes itself (text starting with "<" such as <environment_context>, and
	// "# AGENTS.md instructions ...") are left out, so len(UserTexts) counts the user's turns.
	UserTexts []string
	// LastUserText is the last element of UserTexts ("" when there is none).
	LastUserText string
	// HasToolOutput reports a function_call_output item after the last real user message: the
	// request is the follow-up of a tool call made in the same turn.
	HasToolOutput bool
	// ToolOutput is the output of the last function_call_output item after the last real user
	// message ("" when HasToolOutput is false).
	ToolOutput string
	// Images are the input_image parts of the real user messages in Input, oldest first.
	Images []Image
	// Raw is the request as received: the HTTP body, or the websocket message. Over the
	// websocket it holds only the input items sent since PreviousResponseID, while Input is the
	// whole conversation.
	Raw []byte
	// Bearer is the request's bearer token (over the websocket: the upgrade request's).
	Bearer string
	// Websocket reports a request that came as a response.create message on a websocket.
	Websocket bool
	// PreviousResponseID is the response the request continues ("" when it carried the whole
	// conversation). The mock rebuilt Input from that response's input and output.
	PreviousResponseID string
	// Sent is the number of input items the request itself carried; the first
	// len(Input)-Sent came from PreviousResponseID.
	Sent int
	// Model is the request's model, and Effort its reasoning.effort ("" when it has none).
	Model, Effort string
}

// modelAndEffort reads a request's (or a response.create message's) model and reasoning effort.
func modelAndEffort(raw []byte) (model, effort string) {
	var b struct {
		Model     string `json:"model"`
		Reasoning *struct {
			Effort string `json:"effort"`
		} `json:"reasoning"`
	}
	if json.Unmarshal(raw, &b) != nil {
		return "", ""
	}
	if b.Reasoning != nil {
		effort = b.Reasoning.Effort
	}
	return b.Model, effort
}

// Image is one input_image part of a user message.
type Image struct {
	// Message is the index in UserTexts of the message the image is part of.
	Message int
	// URL is the part's image_url: an http(s) or data: URL.
	URL string
	// Detail is the part's detail ("" when absent).
	Detail string
}

// Reply is what the mock answers to one request.
type Reply struct {
	// Text is the assistant message text. Ignored when Status, Hang or ToolCall is set.
	Text string
	// Status is the HTTP status to answer with instead of a stream, e.g. 500 (0 = 200 stream).
	Status int
	// Hang sends response.created and then nothing until the client goes away or the mock
	// closes: the model stream of a wedged turn.
	Hang bool
	// ToolCall makes the reply a function_call output item instead of a message.
	ToolCall *ToolCall
	// ToolCalls, when ToolCall is nil, makes the reply several function_call output items in one
	// response: parallel tool calls. Empty CallIDs are "call_<n>_<i>".
	ToolCalls []ToolCall
	// Latency is added before the response, on top of Config.Latency.
	Latency time.Duration
	// Hold, when not nil, delays the response (after Latency) until Hold is closed. The client
	// going away or the mock closing ends the wait without an answer. Scripts use it to keep
	// requests in flight until an event of the test's choosing, e.g. a barrier that opens once
	// enough requests have arrived.
	Hold <-chan struct{}
	// FinishLatency is added between the output items and response.completed: a model that has
	// started answering and takes its time to finish.
	FinishLatency time.Duration
	// UsageLimit answers 429 usage_limit_reached instead (see limits.go).
	UsageLimit *UsageLimit
	// RateLimits are the x-codex-* rate limits of the answer (of a usage limit too).
	RateLimits *RateLimits
	// Usage, when set, is the token usage response.completed reports.
	Usage *Usage
}

// ToolCall is a function_call output item. Empty CallID and Name are filled in by the mock
// ("call_<n>" and "exec_command").
type ToolCall struct {
	CallID    string
	Name      string
	Arguments string
}

// Keywords the default script reacts to when they occur in the last user text.
const (
	KeywordHang  = "HANG"
	KeywordFail  = "FAIL"
	KeywordShell = "SHELL"
	KeywordSlow  = "SLOW"
	// KeywordSendFile ("SEND_FILE <path>") makes the model call the send_file tool the daemon
	// offers (package chatfiles) with that path.
	KeywordSendFile = "SEND_FILE"
)

// ShellCommand is the command the default script asks codex to run for KeywordShell.
const ShellCommand = "echo shell-ran"

// SlowLatency is the latency the default script adds for KeywordSlow.
const SlowLatency = 2 * time.Second

// DefaultScript is the reply policy used when Config.Script is nil:
//   - a tool-call follow-up (HasToolOutput) → "tool said: <output>"
//   - "HANG" → Hang; "FAIL" → HTTP 500; "SHELL" → exec_command ShellCommand;
//     "SEND_FILE <path>" → send_file with that path;
//     "SLOW" → the default text after SlowLatency
//   - otherwise "reply #<len(UserTexts)>: <LastUserText>", which lets tests prove that codex
//     sent the conversation history.
func DefaultScript(req Request) Reply {
	if req.HasToolOutput {
		return Reply{Text: "tool said: " + req.ToolOutput}
	}
	last := req.LastUserText
	switch {
	case strings.Contains(last, KeywordHang):
		return Reply{Hang: true}
	case strings.Contains(last, KeywordFail):
		return Reply{Status: http.StatusInternalServerError}
	case strings.Contains(last, KeywordShell):
		// login:false keeps the user's shell profile out of the output (codex defaults to
		// `bash -lc`, which sources ~/.profile and friends).
		args, _ := json.Marshal(map[string]any{"cmd": ShellCommand, "login": false})
		return Reply{ToolCall: &ToolCall{Name: "exec_command", Arguments: string(args)}}
	case strings.Contains(last, KeywordSendFile+" "):
		_, rest, _ := strings.Cut(last, KeywordSendFile+" ")
		path, _, _ := strings.Cut(strings.TrimSpace(rest), " ")
		args, _ := json.Marshal(map[string]string{"path": path})
		return Reply{ToolCall: &ToolCall{Name: "send_file", Arguments: string(args)}}
	case strings.Contains(last, KeywordSlow):
		return Reply{Text: DefaultText(req), Latency: SlowLatency}
	}
	return Reply{Text: DefaultText(req)}
}

// DefaultText is the default reply text: "reply #<n>: <last user text>".
func DefaultText(req Request) string {
	return fmt.Sprintf("reply #%d: %s", len(req.UserTexts), req.LastUserText)
}

// Model is a Responses-API server on 127.0.0.1 that real codex can talk to (see
// WriteCodexHome). It records every request and answers by script.
type Model struct {
	cfg       Config
	srv       *http.Server
	url       string
	closing   chan struct{} // closed by Close: releases hung streams and latency waits
	serveDone chan struct{} // closed when the Serve goroutine returned
	closeOnce sync.Once
	closeErr  error
	caPEM     []byte // the generating CA's certificate with Config.TLS

	mu           sync.Mutex
	closed       bool           // no new handlers may register once set
	handlers     sync.WaitGroup // running handlers; Add only under mu while !closed
	requests     []Request
	hung         int // streams that entered the hang state, cumulative
	unauthorized int // requests refused by Config.Authorize
	inflight     int // handlers running now
	answering    int // /v1/responses requests being answered now
	peak         int // high-water mark of answering since New or ResetMaxInFlight
	unhandled    []string
	warmups      []Request            // response.create messages with generate:false
	sockets      int                  // websockets accepted, cumulative
	conns        map[*wsConn]struct{} // open websockets
	changed      chan struct{}        // closed and replaced whenever requests, hung or inflight change
}

// New starts a Model listening on Config.Addr (default: a free port of 127.0.0.1).
func New(cfg Config) (*Model, error) {
	addr := cfg.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("mock model: address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("mock model: address %q is not on loopback", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("mock model: listen: %w", err)
	}
	m := &Model{
		cfg:       cfg,
		url:       "http://" + ln.Addr().String() + "/v1",
		closing:   make(chan struct{}),
		serveDone: make(chan struct{}),
		changed:   make(chan struct{}),
		conns:     make(map[*wsConn]struct{}),
	}
	if cfg.TLS {
		ca, tlsConf, err := newTLS(host)
		if err != nil {
			return nil, errors.Join(err, ln.Close())
		}
		m.caPEM = ca
		m.url = "https://" + ln.Addr().String() + "/v1"
		ln = tls.NewListener(ln, tlsConf)
	}
	m.srv = &http.Server{Handler: m, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(m.serveDone)
		_ = m.srv.Serve(ln) // returns http.ErrServerClosed after Close
	}()
	return m, nil
}

// URL is the provider base URL for codex: http://127.0.0.1:PORT/v1 (https with Config.TLS).
func (m *Model) URL() string { return m.url }

// Requests returns a copy of the /v1/responses requests received so far, in arrival order.
func (m *Model) Requests() []Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Request(nil), m.requests...)
}

// Unauthorized is the number of requests refused by Config.Authorize so far.
func (m *Model) Unauthorized() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.unauthorized
}

// WaitUnauthorized blocks until at least n requests were refused by Config.Authorize.
func (m *Model) WaitUnauthorized(ctx context.Context, n int) error {
	return m.wait(ctx, func() bool { return m.unauthorized >= n }, fmt.Sprintf("%d refused requests", n))
}

// RequestCount is the number of /v1/responses requests received so far.
func (m *Model) RequestCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.requests)
}

// Hung is the number of streams that have entered the hang state so far (cumulative: a stream
// released by a disconnect still counts).
func (m *Model) Hung() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.hung
}

// WaitHung blocks until at least n streams have entered the hang state (response.created was
// flushed to codex), or ctx is done. Tests use it instead of sleeping before an interrupt.
func (m *Model) WaitHung(ctx context.Context, n int) error {
	return m.wait(ctx, func() bool { return m.hung >= n }, "hung streams")
}

// WaitRequests blocks until at least n /v1/responses requests were received, or ctx is done.
func (m *Model) WaitRequests(ctx context.Context, n int) error {
	return m.wait(ctx, func() bool { return len(m.requests) >= n }, "requests")
}

// WaitIdle blocks until no request handler is running, or ctx is done: a hung stream whose
// client went away has been released.
func (m *Model) WaitIdle(ctx context.Context) error {
	return m.wait(ctx, func() bool { return m.inflight == 0 }, "handlers to return")
}

// InFlight is the number of model requests (POST /v1/responses) being answered now, from the
// request's parsed body until its response was written or the client went away.
func (m *Model) InFlight() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.answering
}

// MaxInFlight is the largest number of model requests answered at once since New or the last
// ResetMaxInFlight: how many turns a client of the mock ran in parallel.
func (m *Model) MaxInFlight() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peak
}

// ResetMaxInFlight returns MaxInFlight and starts a new mark from the number in flight now, so
// that one experiment after another can each read its own.
func (m *Model) ResetMaxInFlight() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	prev := m.peak
	m.peak = m.answering
	return prev
}

// Unhandled lists "METHOD /path" of requests the mock did not serve (anything but POST
// /v1/responses), so tests can assert that codex stayed on the mock and offline.
func (m *Model) Unhandled() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.unhandled...)
}

func (m *Model) wait(ctx context.Context, cond func() bool, what string) error {
	for {
		m.mu.Lock()
		ok, ch := cond(), m.changed
		m.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("mock model: waiting for %s: %w", what, context.Cause(ctx))
		}
	}
}

// notifyLocked wakes waiters; m.mu must be held.
func (m *Model) notifyLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// Close stops the server: hung streams and latency waits are released, open connections are
// closed, and Close returns after every handler and the serve goroutine have returned. It is
// idempotent.
func (m *Model) Close() error {
	m.closeOnce.Do(func() {
		m.mu.Lock()
		m.closed = true
		m.mu.Unlock()
		close(m.closing)
		// Shutdown does not track hijacked connections: each websocket's loop ends on closing.
		// Handlers return promptly once closing is closed, so a graceful shutdown normally
		// finishes at once; the deadline only guards against a client that never reads.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := m.srv.Shutdown(ctx)
		cancel()
		if err != nil {
			m.closeErr = errors.Join(fmt.Errorf("mock model: shutdown: %w", err), m.srv.Close())
		}
		m.handlers.Wait()
		<-m.serveDone
	})
	return m.closeErr
}

// ServeHTTP implements http.Handler.
func (m *Model) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		http.Error(w, "mock model closed", http.StatusServiceUnavailable)
		return
	}
	m.handlers.Add(1)
	if isUpgrade(r) && !m.cfg.HTTPOnly && strings.HasSuffix(r.URL.Path, "/responses") {
		// A websocket lives as long as codex keeps it; only the responses answered on it count
		// as in flight.
		m.mu.Unlock()
		defer m.handlers.Done()
		m.serveWebsocket(w, r)
		return
	}
	m.inflight++
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.inflight--
		m.notifyLocked()
		m.mu.Unlock()
		m.handlers.Done()
	}()

	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/responses") {
		m.mu.Lock()
		m.unhandled = append(m.unhandled, r.Method+" "+r.URL.Path)
		m.mu.Unlock()
		http.NotFound(w, r)
		return
	}
	m.serveResponses(w, r)
}

func (m *Model) serveResponses(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		// The client went away mid-body; nothing to answer.
		return
	}
	req, err := parseRequest(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req.Bearer = bearerOf(r)
	if !m.authorized(req.Bearer) {
		writeUnauthorized(w)
		return
	}
	_, _, _ = m.answer(r.Context(), req, &sseEmitter{w: w})
}

// bearerOf is a request's bearer token: its Authorization header without "Bearer ".
func bearerOf(r *http.Request) string {
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
}

// authorized applies Config.Authorize and counts a refusal.
func (m *Model) authorized(bearer string) bool {
	if m.cfg.Authorize == nil || m.cfg.Authorize(bearer) {
		return true
	}
	m.mu.Lock()
	m.unauthorized++
	m.notifyLocked()
	m.mu.Unlock()
	return false
}

// writeUnauthorized answers 401 with the body the real API sends for an expired token.
func writeUnauthorized(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = io.WriteString(w, unauthorizedBody)
}

const unauthorizedBody = `{"error":{"message":"Your authentication token has expired. Please try signing in again.","type":"invalid_request_error","code":"token_expired","param":null}}`

// pause waits d, and reports false when the client went away or the mock closed first.
func (m *Model) pause(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-m.closing:
		return false
	}
}

// hold waits until release is closed (at once when it is nil), and reports false when the
// client went away or the mock closed first.
func (m *Model) hold(ctx context.Context, release <-chan struct{}) bool {
	if release == nil {
		return true
	}
	select {
	case <-release:
		return true
	case <-ctx.Done():
		return false
	case <-m.closing:
		return false
	}
}

// responsesBody is the part of a Responses API request body the mock reads.
type responsesBody struct {
	Input []json.RawMessage `json:"input"`
}

// inputItem is the part of an input item the mock reads. Content and Output vary in shape
// (string or list of parts), so they stay raw.
type inputItem struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	Output  json.RawMessage `json:"output"`
}

// parseRequest extracts what scripts need from a request body.
func parseRequest(body []byte) (Request, error) {
	var b responsesBody
	if err := json.Unmarshal(body, &b); err != nil {
		return Request{}, fmt.Errorf("mock model: decode request body: %w", err)
	}
	req := parseInput(b.Input)
	req.Raw = body
	req.Model, req.Effort = modelAndEffort(body)
	return req, nil
}

// parseInput extracts what scripts need from a whole conversation.
func parseInput(input []json.RawMessage) Request {
	req := Request{Input: input}
	for _, raw := range input {
		var it inputItem
		if json.Unmarshal(raw, &it) != nil {
			continue
		}
		switch {
		case it.Role == "user" && (it.Type == "" || it.Type == "message"):
			text := partsText(it.Content)
			if isCodexContext(text) {
				continue
			}
			for _, img := range partImages(it.Content) {
				img.Message = len(req.UserTexts)
				req.Images = append(req.Images, img)
			}
			req.UserTexts = append(req.UserTexts, text)
			req.HasToolOutput, req.ToolOutput = false, ""
		case it.Type == "function_call_output" || it.Type == "custom_tool_call_output":
			req.HasToolOutput, req.ToolOutput = true, partsText(it.Output)
		}
	}
	if n := len(req.UserTexts); n > 0 {
		req.LastUserText = req.UserTexts[n-1]
	}
	return req
}

// isCodexContext reports a user-role message that codex composed itself rather than the user:
// "<environment_context>...", "<turn_aborted>..." and similar tagged blocks, and the project's
// AGENTS.md instructions ("# AGENTS.md instructions for DIR\n\n<INSTRUCTIONS>..."), which codex
// 0.169.0 sends as user messages in front of the first real one.
func isCodexContext(text string) bool {
	t := strings.TrimSpace(text)
	return strings.HasPrefix(t, "<") || strings.HasPrefix(t, "# AGENTS.md instructions")
}

// partImages returns the input_image parts of a content list.
func partImages(raw json.RawMessage) []Image {
	var parts []struct {
		Type     string `json:"type"`
		ImageURL string `json:"image_url"`
		Detail   string `json:"detail"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return nil
	}
	var imgs []Image
	for _, p := range parts {
		if p.Type == "input_image" {
			imgs = append(imgs, Image{URL: p.ImageURL, Detail: p.Detail})
		}
	}
	return imgs
}

// partsText flattens a content or output value: a plain string, or a list of parts whose text
// fields are joined.
func partsText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	texts := make([]string, 0, len(parts))
	for _, p := range parts {
		texts = append(texts, p.Text)
	}
	return strings.Join(texts, "")
}
