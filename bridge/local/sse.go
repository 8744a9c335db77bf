package local

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/molecule-ai/codex-warm/supervisor"
)

// Event names of the local inbox's event stream besides the supervisor.TurnProgress kinds
// (turn_started, item_started, item_completed; no delta: the daemon opts its children out of
// item/agentMessage/delta, see package daemon).
const (
	// EventReply carries the answer a plain request would get with status 200 (Reply).
	EventReply = "reply"
	// EventError carries the answer a plain request would get with another status (ErrorReply),
	// with that status as "http_status" and its Retry-After, if any, as "retry_after".
	EventError = "error"
)

// sseBuffer bounds the steps waiting for a slow stream reader. The observer runs on the codex
// child's reader and must not wait, so steps beyond it are dropped (counted in the reply event
// as "dropped_events"); the final reply is never dropped.
const sseBuffer = 256

// wantsEventStream reports whether the request's Accept header asks for text/event-stream.
func wantsEventStream(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == "text/event-stream" {
			return true
		}
	}
	return false
}

// eventStream answers a message as server-sent events: the turn's steps as they happen, then
// the answer a plain request would get. It is the http.ResponseWriter the plain answer is
// written to: that answer is held back and sent as the last event by finish.
type eventStream struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	out chan supervisor.TurnProgress
	// wrote is closed when the writer goroutine has sent every step it got.
	wrote chan struct{}

	mu      sync.Mutex
	closed  bool
	dropped int

	// The plain answer, held back.
	hdr    http.Header
	status int
	body   bytes.Buffer
}

// startEventStream sends the stream's headers and starts its writer; finish ends both.
func startEventStream(w http.ResponseWriter) *eventStream {
	s := &eventStream{w: w, rc: http.NewResponseController(w), out: make(chan supervisor.TurnProgress, sseBuffer),
		wrote: make(chan struct{}), hdr: make(http.Header)}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_ = s.rc.Flush()
	go func() {
		defer close(s.wrote)
		for p := range s.out {
			s.send(p.Kind, p)
		}
	}()
	return s
}

// observe takes a step of the turn (supervisor.WithProgress). It may come after finish when
// the caller went away while the turn ran on; such steps are dropped.
func (s *eventStream) observe(p supervisor.TurnProgress) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	select {
	case s.out <- p:
	default:
		s.dropped++
	}
}

func (s *eventStream) send(event string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	// JSON never holds a raw newline, so one data line carries the event.
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", event, b); err == nil {
		_ = s.rc.Flush()
	}
}

// finish waits for the steps to be written and sends the held-back answer as the last event.
func (s *eventStream) finish() {
	s.mu.Lock()
	s.closed = true
	close(s.out)
	dropped := s.dropped
	s.mu.Unlock()
	<-s.wrote

	var doc map[string]any
	if json.Unmarshal(s.body.Bytes(), &doc) != nil {
		doc = map[string]any{"error": strings.TrimSpace(s.body.String())}
	}
	if dropped > 0 {
		doc["dropped_events"] = dropped
	}
	if s.status == 0 || s.status == http.StatusOK {
		s.send(EventReply, doc)
		return
	}
	doc["http_status"] = s.status
	if ra := s.hdr.Get("Retry-After"); ra != "" {
		if n, err := strconv.Atoi(ra); err == nil {
			doc["retry_after"] = n
		}
	}
	s.send(EventError, doc)
}

// Header, WriteHeader and Write take the plain answer.
func (s *eventStream) Header() http.Header { return s.hdr }

func (s *eventStream) WriteHeader(status int) {
	if s.status == 0 {
		s.status = status
	}
}

func (s *eventStream) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.body.Write(b)
}
