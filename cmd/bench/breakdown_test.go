package main

import (
	"math"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// stepsOf takes the first request inside the post's window, its first byte, and the connect and
// upgrade of its own connection when they fall inside the window; another connection's steps (a
// spare starting meanwhile) and steps outside the window are not the message's.
func TestStepsOf(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	events := []mockmodel.Event{
		{Kind: mockmodel.EventConnect, At: at(-500), Conn: 1},
		{Kind: mockmodel.EventUpgrade, At: at(-450), Conn: 1},
		{Kind: mockmodel.EventRequest, At: at(-100), Conn: 1, Request: 1}, // before the window
		{Kind: mockmodel.EventFirstByte, At: at(-99), Conn: 1, Request: 1},
		{Kind: mockmodel.EventConnect, At: at(5), Conn: 2}, // a spare's, in the window
		{Kind: mockmodel.EventConnect, At: at(10), Conn: 3},
		{Kind: mockmodel.EventUpgrade, At: at(20), Conn: 2},
		{Kind: mockmodel.EventUpgrade, At: at(30), Conn: 3},
		{Kind: mockmodel.EventRequest, At: at(40), Conn: 3, Request: 2},
		{Kind: mockmodel.EventFirstByte, At: at(45), Conn: 3, Request: 2},
		{Kind: mockmodel.EventRequest, At: at(60), Conn: 2, Request: 3},
	}
	s := stepsOf(events, msgSample{start: t0, wall: 80 * time.Millisecond, turnMS: 75})
	want := msgSteps{wall: 80, daemon: 5, connect: 10, upgrade: 30, request: 40, firstByte: 45, newConn: true}
	if s != want {
		t.Errorf("new connection: got %+v\nwant %+v", s, want)
	}

	// On the connection opened before the window: no connect, no upgrade.
	s = stepsOf(events, msgSample{start: at(-200), wall: 150 * time.Millisecond, turnMS: 149})
	if s.newConn || !math.IsNaN(s.connect) || !math.IsNaN(s.upgrade) || s.request != 100 || s.firstByte != 101 {
		t.Errorf("reused connection: got %+v", s)
	}

	// No request in the window.
	s = stepsOf(events, msgSample{start: at(100), wall: time.Millisecond})
	if !math.IsNaN(s.request) || !math.IsNaN(s.firstByte) || s.newConn {
		t.Errorf("no request: got %+v", s)
	}
}
