//go:build linux

package main

import (
	"context"
	"testing"

	"github.com/molecule-ai/codex-warm/supervisor"
)

// The model service closes its websockets (OpenAI closes long-lived ones) while a chat's child
// and a spare sit idle on them: codex opens a new websocket at the next request, sending the
// whole conversation, so the chat's next message and a new chat's first message on the spare
// are answered normally, with no failed turn and no retry from the daemon.
func TestE2EWebsocketClosedByServerWhileIdle(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true, TLS: true})
	d := e.start("--spares", "1")
	c := newLocalClient(t, d)
	if r := c.send("a", "one"); r.Status != "completed" || r.Text != "reply #1: one" {
		t.Fatalf("first message: %+v", r)
	}
	var spare supervisor.ChildStatus
	d.waitUntil("a spare", func() bool {
		sp := spares(d.status())
		if len(sp) == 1 {
			spare = sp[0]
		}
		return len(sp) == 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	// One websocket per child: the chat's and the spare's (opened at its thread/start).
	if err := e.mock.WaitOpenWebsockets(ctx, 2); err != nil {
		t.Fatalf("%v (the children opened %d)", err, e.mock.Websockets())
	}
	before := e.mock.RequestCount()
	if n := e.mock.CloseWebsockets(); n != 2 {
		t.Fatalf("closed %d websockets, want 2", n)
	}
	if err := e.mock.WaitOpenWebsockets(ctx, 0); err != nil {
		t.Fatal(err)
	}

	if r := c.send("a", "two"); r.Status != "completed" || r.Text != "reply #2: two" {
		t.Errorf("the chat's message after the close: %+v", r)
	}
	r := c.send("b", "hello")
	if r.Status != "completed" || r.Text != "reply #1: hello" || r.ThreadID != spare.ThreadID {
		t.Errorf("a new chat's first message on the spare after the close: %+v (spare thread %s)", r, spare.ThreadID)
	}
	reqs := e.mock.Requests()[before:]
	if len(reqs) != 2 {
		t.Fatalf("%d model requests after the close, want 2 (no retry)", len(reqs))
	}
	for _, req := range reqs {
		if !req.Websocket || req.PreviousResponseID != "" || req.Sent != len(req.Input) {
			t.Errorf("request %d: websocket %v previous %q, sent %d of %d items; want the whole conversation on a new websocket",
				req.N, req.Websocket, req.PreviousResponseID, req.Sent, len(req.Input))
		}
	}
	if got := e.mock.Websockets(); got < 4 {
		t.Errorf("%d websockets accepted, want the two closed and a new one per child", got)
	}
	if n := len(d.logsWith("turn failed")); n != 0 {
		t.Errorf("%d failed turns logged", n)
	}
	d.stop(stopTimeout)
}
