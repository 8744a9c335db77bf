package mockmodel

import (
	"net"
	"net/http"
	"time"
)

// EventKind names a step of the model's side of a request, as the mock saw it.
type EventKind string

// The steps the mock records on its timeline.
const (
	// EventConnect is a new TCP connection accepted (before any TLS handshake).
	EventConnect EventKind = "connect"
	// EventUpgrade is a websocket upgrade request received (the TLS handshake done).
	EventUpgrade EventKind = "upgrade"
	// EventWarmup is a warm-up response.create (generate:false) received on a websocket.
	EventWarmup EventKind = "warmup"
	// EventRequest is a model request received: its whole body (HTTP) or message (websocket).
	EventRequest EventKind = "request"
	// EventFirstByte is the first event of a request's answer written (after Config.Latency):
	// what codex reads as the model's first byte, one way trip later.
	EventFirstByte EventKind = "first-byte"
)

// Event is one step on the mock's timeline.
type Event struct {
	Kind EventKind
	At   time.Time
	// Conn numbers the connection the step came on, from 1 in accept order (0: unknown).
	Conn int
	// Request is the N of the request (EventRequest, EventFirstByte) or warm-up (EventWarmup).
	Request int
}

// Timeline returns the steps recorded so far, in the order they happened.
func (m *Model) Timeline() []Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Event(nil), m.timeline...)
}

// record appends a step to the timeline.
func (m *Model) record(kind EventKind, conn, request int) {
	now := time.Now()
	m.mu.Lock()
	m.timeline = append(m.timeline, Event{Kind: kind, At: now, Conn: conn, Request: request})
	m.notifyLocked()
	m.mu.Unlock()
}

// connState is the server's ConnState hook: it numbers new connections and records them.
func (m *Model) connState(c net.Conn, s http.ConnState) {
	switch s {
	case http.StateNew:
	case http.StateClosed, http.StateHijacked:
		m.mu.Lock()
		delete(m.connN, c)
		m.mu.Unlock()
		return
	default:
		return
	}
	now := time.Now()
	m.mu.Lock()
	m.connSeq++
	m.connN[c] = m.connSeq
	m.timeline = append(m.timeline, Event{Kind: EventConnect, At: now, Conn: m.connSeq})
	m.notifyLocked()
	m.mu.Unlock()
}

// connOf is the number connState gave the request's connection (0 when unknown).
func (m *Model) connOf(r *http.Request) int {
	c, ok := r.Context().Value(connKey{}).(net.Conn)
	if !ok {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.connN[c]
}

// connKey is the request context key under which connContext stores the connection.
type connKey struct{}
