package mockmodel

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// maxWSMessage bounds one response.create message: the whole conversation of a long chat with
// images fits, a runaway client does not.
const maxWSMessage = 64 << 20

// Websocket message types and codes of the Responses API that the mock speaks.
const (
	wsTypeCreate    = "response.create"
	wsTypeProcessed = "response.processed"
	// codePreviousNotFound answers a previous_response_id the connection does not hold.
	codePreviousNotFound = "previous_response_not_found"
)

// wsConn is one open websocket and the state the real API keeps per connection: the last
// response, which is the only one previous_response_id may name.
type wsConn struct {
	c      *websocket.Conn
	bearer string
	lastID string
	// last is the conversation response lastID ended: its whole input and its output items.
	last []json.RawMessage
}

// createMessage is the part of a response.create message the mock reads.
type createMessage struct {
	Type               string            `json:"type"`
	PreviousResponseID string            `json:"previous_response_id"`
	Generate           *bool             `json:"generate"`
	Input              []json.RawMessage `json:"input"`
}

// isUpgrade reports a websocket upgrade request.
func isUpgrade(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

// serveWebsocket accepts a websocket on /v1/responses and answers its response.create messages
// one at a time, as codex sends them, until codex or the mock closes it.
func (m *Model) serveWebsocket(w http.ResponseWriter, r *http.Request) {
	bearer := bearerOf(r)
	if !m.authorized(bearer) {
		writeUnauthorized(w)
		return
	}
	// codex offers permessage-deflate; taking it keeps the mock's wire like production's.
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionContextTakeover})
	if err != nil {
		return // Accept has answered the client
	}
	defer c.CloseNow()
	c.SetReadLimit(maxWSMessage)
	wc := &wsConn{c: c, bearer: bearer}
	m.mu.Lock()
	m.sockets++
	m.conns[wc] = struct{}{}
	m.notifyLocked()
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.conns, wc)
		m.notifyLocked()
		m.mu.Unlock()
	}()

	// The reader keeps reading while a response is answered, so that codex closing the
	// connection releases a hung or held response at once.
	var reader sync.WaitGroup
	defer reader.Wait()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs := make(chan []byte, 16)
	reader.Go(func() {
		defer cancel()
		for {
			_, data, err := c.Read(ctx)
			if err != nil {
				return
			}
			select {
			case msgs <- data:
			case <-ctx.Done():
				return
			}
		}
	})

	var tooOld <-chan time.Time
	if m.cfg.MaxConnAge > 0 {
		t := time.NewTimer(m.cfg.MaxConnAge)
		defer t.Stop()
		tooOld = t.C
	}
	for {
		select {
		case data := <-msgs:
			m.wsMessage(ctx, wc, data)
		case <-tooOld:
			_ = c.Close(websocket.StatusGoingAway, "mock model: connection too old")
			return
		case <-m.closing:
			_ = c.Close(websocket.StatusGoingAway, "mock model closing")
			return
		case <-ctx.Done():
			return
		}
	}
}

// wsMessage answers one message of a websocket.
func (m *Model) wsMessage(ctx context.Context, wc *wsConn, data []byte) {
	e := &wsEmitter{ctx: ctx, c: wc.c}
	var msg createMessage
	if err := json.Unmarshal(data, &msg); err != nil {
		e.error(http.StatusBadRequest, "invalid_request_error", "", fmt.Sprintf("mock model: decode message: %v", err))
		return
	}
	switch msg.Type {
	case wsTypeCreate:
	case wsTypeProcessed:
		return // an acknowledgement; nothing to answer
	default:
		m.mu.Lock()
		m.unhandled = append(m.unhandled, "WS "+msg.Type)
		m.mu.Unlock()
		e.error(http.StatusBadRequest, "invalid_request_error", "", "mock model: unknown message type "+strconv.Quote(msg.Type))
		return
	}
	full := msg.Input
	if prev := msg.PreviousResponseID; prev != "" {
		if prev != wc.lastID {
			e.error(http.StatusBadRequest, "invalid_request_error", codePreviousNotFound,
				fmt.Sprintf("mock model: previous response %q is not this connection's last", prev))
			return
		}
		full = append(slices.Clip(wc.last), msg.Input...)
	}
	// A token that went bad while the websocket was open is refused per request, as over HTTP,
	// with the error event the real API sends in place of a 401.
	if !m.authorized(wc.bearer) {
		e.event(unauthorizedEvent())
		return
	}
	req := parseInput(full)
	req.Raw = data
	req.Model, req.Effort = modelAndEffort(data)
	req.Bearer = wc.bearer
	req.Websocket = true
	req.PreviousResponseID = msg.PreviousResponseID
	req.Sent = len(msg.Input)
	// Only a completed response may be continued.
	wc.lastID, wc.last = "", nil

	if msg.Generate != nil && !*msg.Generate {
		m.mu.Lock()
		req.N = len(m.warmups) + 1
		m.warmups = append(m.warmups, req)
		m.notifyLocked()
		m.mu.Unlock()
		id := "resp_warmup_" + strconv.Itoa(req.N)
		if e.event(map[string]any{"type": "response.created", "response": map[string]any{"id": id}}) &&
			e.event(completedEvent(id, 0, 0)) {
			wc.lastID, wc.last = id, full
		}
		return
	}
	id, items, ok := m.answer(ctx, req, e)
	if !ok {
		return
	}
	for _, item := range items {
		b, err := json.Marshal(item)
		if err != nil {
			panic(err) // only our own maps are marshalled here
		}
		full = append(full, b)
	}
	wc.lastID, wc.last = id, full
}

// unauthorizedEvent is the websocket form of the 401 writeUnauthorized answers.
func unauthorizedEvent() map[string]any {
	var body map[string]any
	if err := json.Unmarshal([]byte(unauthorizedBody), &body); err != nil {
		panic(err) // a constant
	}
	body["type"] = "error"
	body["status"] = http.StatusUnauthorized
	return body
}

// wsEmitter writes a response as websocket text messages, one event each.
type wsEmitter struct {
	ctx context.Context
	c   *websocket.Conn
}

func (e *wsEmitter) event(data map[string]any) bool {
	b, err := json.Marshal(data)
	if err != nil {
		panic(err) // only our own maps are marshalled here
	}
	return e.c.Write(e.ctx, websocket.MessageText, b) == nil
}

// status sends the error event the real API sends over the websocket in place of an HTTP
// error status; codex maps it back to that status.
func (e *wsEmitter) status(code int) {
	e.error(code, "server_error", "", fmt.Sprintf("mock model: scripted status %d", code))
}

func (e *wsEmitter) error(status int, typ, code, message string) {
	body := map[string]any{"type": typ, "message": message}
	if code != "" {
		body["code"] = code
	}
	e.event(map[string]any{"type": "error", "status": status, "error": body})
}

// Websockets is the number of websockets the mock accepted so far.
func (m *Model) Websockets() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sockets
}

// OpenWebsockets is the number of websockets open now.
func (m *Model) OpenWebsockets() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.conns)
}

// WaitWebsockets blocks until the mock accepted at least n websockets, or ctx is done.
func (m *Model) WaitWebsockets(ctx context.Context, n int) error {
	return m.wait(ctx, func() bool { return m.sockets >= n }, fmt.Sprintf("%d websockets", n))
}

// WaitOpenWebsockets blocks until exactly n websockets are open, or ctx is done.
func (m *Model) WaitOpenWebsockets(ctx context.Context, n int) error {
	return m.wait(ctx, func() bool { return len(m.conns) == n }, fmt.Sprintf("%d open websockets", n))
}

// Warmups returns the warm-up requests (response.create with generate:false) received so far,
// in arrival order. They are answered with an empty response and are not in Requests: no
// script sees them.
func (m *Model) Warmups() []Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Request(nil), m.warmups...)
}

// WaitWarmups blocks until at least n warm-up requests were received, or ctx is done.
func (m *Model) WaitWarmups(ctx context.Context, n int) error {
	return m.wait(ctx, func() bool { return len(m.warmups) >= n }, fmt.Sprintf("%d warm-ups", n))
}

// CloseWebsockets closes every open websocket from the server's side (close code 1001, going
// away), as the real API closes long-lived connections, and returns how many it closed. A
// response being answered on one ends unanswered. It returns once the closes are sent.
func (m *Model) CloseWebsockets() int {
	m.mu.Lock()
	conns := make([]*wsConn, 0, len(m.conns))
	for wc := range m.conns {
		conns = append(conns, wc)
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, wc := range conns {
		// Close waits for codex's close frame; closing them side by side bounds the wait.
		wg.Go(func() { _ = wc.c.Close(websocket.StatusGoingAway, "mock model: closed by the server") })
	}
	wg.Wait()
	return len(conns)
}
