package appserver_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// TestRealWebsocketTransport: on the mock's default transport (TLS here, as production), codex
// opens one websocket per process at thread/start and warms it up with generate:false; every
// request continues the previous response with only the new input, the first continuing the
// warm-up. The mock rebuilds the whole conversation, so scripts see the same history as over
// HTTP. After the server closes the idle websocket, the next turn opens a new one and sends the
// whole conversation: nothing fails.
func TestRealWebsocketTransport(t *testing.T) {
	noLeaks(t)
	e := newRealEnv(t, mockmodel.Config{TLS: true})
	ca := filepath.Join(e.home, "mock-ca.pem")
	if err := e.mock.WriteCA(ca); err != nil {
		t.Fatal(err)
	}
	c := e.start(t, func(cfg *appserver.Config) {
		cfg.Env = append(os.Environ(), "SSL_CERT_FILE="+ca)
	})
	ctx := ctxTimeout(t, 2*time.Minute)
	thread, err := c.StartThread(ctx, e.threadOpts("never"))
	if err != nil {
		t.Fatalf("start thread: %v (stderr: %s)", err, c.StderrTail())
	}
	if err := e.mock.WaitWarmups(ctx, 1); err != nil {
		t.Fatalf("no warm-up after thread/start: %v (stderr: %s)", err, c.StderrTail())
	}
	if n := e.mock.RequestCount(); n != 0 {
		t.Fatalf("%d model requests before the first turn", n)
	}
	for _, msg := range []string{"one", "two", "three"} {
		if r := mustTurn(t, c, ctx, thread, msg); r.Status != protocol.TurnCompleted || !strings.HasSuffix(replyOf(r), ": "+msg) {
			t.Fatalf("turn %q: status %q reply %q", msg, r.Status, replyOf(r))
		}
	}
	reqs := e.mock.Requests()
	prev := "resp_warmup_1"
	for i, r := range reqs {
		if !r.Websocket || r.PreviousResponseID != prev || len(r.UserTexts) != i+1 {
			t.Errorf("request %d: websocket %v previous %q (want %q) user texts %q", r.N, r.Websocket, r.PreviousResponseID, prev, r.UserTexts)
		}
		prev = "resp_" + strconv.Itoa(r.N)
	}
	if last := reqs[len(reqs)-1]; last.Sent != 1 || len(last.Input) <= last.Sent {
		t.Errorf("third request sent %d of %d items, want only the new message", last.Sent, len(last.Input))
	}
	if e.mock.Websockets() != 1 || len(e.mock.Warmups()) != 1 {
		t.Errorf("%d websockets, %d warm-ups for one thread; want 1 and 1", e.mock.Websockets(), len(e.mock.Warmups()))
	}

	if n := e.mock.CloseWebsockets(); n != 1 {
		t.Fatalf("closed %d websockets, want 1", n)
	}
	r := mustTurn(t, c, ctx, thread, "after the close")
	if r.Status != protocol.TurnCompleted || replyOf(r) != "reply #4: after the close" {
		t.Fatalf("turn after a server-side close: status %q error %+v reply %q", r.Status, r.Error, replyOf(r))
	}
	after := e.mock.Requests()[len(reqs)]
	if !after.Websocket || after.PreviousResponseID != "" || after.Sent != len(after.Input) {
		t.Errorf("request after the close: websocket %v previous %q sent %d of %d, want the whole conversation on a new websocket",
			after.Websocket, after.PreviousResponseID, after.Sent, len(after.Input))
	}
	if e.mock.Websockets() != 2 || len(e.mock.Warmups()) != 1 {
		t.Errorf("after the close: %d websockets, %d warm-ups; want 2 and 1 (no new warm-up)", e.mock.Websockets(), len(e.mock.Warmups()))
	}
}
