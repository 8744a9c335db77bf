package mockmodel

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"
)

// kinds lists the kinds of events, in order.
func kinds(events []Event) []EventKind {
	out := make([]EventKind, len(events))
	for i, e := range events {
		out[i] = e.Kind
	}
	return out
}

// TestMockModelTimeline: the timeline holds each connection as it is accepted, the upgrade of a
// websocket, a warm-up, and each request with its first byte, in order, every step naming its
// connection; a second request on the same websocket opens nothing new.
func TestMockModelTimeline(t *testing.T) {
	checkMockLeaks(t)
	m := newTestMock(t, Config{})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := mustDialWS(ctx, t, m)
	prefix := codexPrefixItems()
	warm, err := c.create(ctx, map[string]any{"model": "mock-model", "input": prefix[:1], "generate": false})
	if err != nil {
		t.Fatal(err)
	}
	first, err := c.create(ctx, map[string]any{"model": "mock-model", "previous_response_id": responseID(t, warm),
		"input": append(prefix[1:], inputMsg("user", "hello"))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.create(ctx, map[string]any{"model": "mock-model", "previous_response_id": responseID(t, first),
		"input": []any{inputMsg("user", "again")}}); err != nil {
		t.Fatal(err)
	}
	resp, err := postResponses(ctx, t, m, inputMsg("user", "over http"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	events := m.Timeline()
	want := []EventKind{EventConnect, EventUpgrade, EventWarmup, EventRequest, EventFirstByte, EventRequest, EventFirstByte,
		EventConnect, EventRequest, EventFirstByte}
	if got := kinds(events); !slices.Equal(got, want) {
		t.Fatalf("timeline %v\nwant %v", got, want)
	}
	wantConn := []int{1, 1, 1, 1, 1, 1, 1, 2, 2, 2}
	wantReq := []int{0, 0, 1, 1, 1, 2, 2, 0, 3, 3}
	for i, e := range events {
		if e.Conn != wantConn[i] || e.Request != wantReq[i] {
			t.Errorf("event %d (%s): connection %d request %d, want %d and %d", i, e.Kind, e.Conn, e.Request, wantConn[i], wantReq[i])
		}
		if i > 0 && e.At.Before(events[i-1].At) {
			t.Errorf("event %d (%s) at %v, before the one before it", i, e.Kind, e.At)
		}
	}
	if reqs := m.Requests(); reqs[0].Conn != 1 || reqs[2].Conn != 2 {
		t.Errorf("requests' connections %d, %d; want 1 and 2", reqs[0].Conn, reqs[2].Conn)
	}
}
