package molecule

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest/observer"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// The token never reaches the logs: a full register/poll/reply/heartbeat cycle in which every
// kind of call fails once with an error body that quotes the request's Authorization header (as
// a careless proxy would), plus a hung request (a transport error naming the URL), a codex error
// that quotes the token, and a fatal 401 at register.
func TestTokenNeverLogged(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{LeakAuthInErrors: true, AckEnabled: false})
	token := p.Token()
	a := chattest.NewAnswerer(func(_ context.Context, key, text string) (supervisor.Reply, error) {
		if text == "leak" {
			return supervisor.Reply{}, fmt.Errorf("tool printed Authorization: Bearer %s", token)
		}
		return chattest.EchoReply(key, text), nil
	})
	log, logs := newTestLogger(t)
	cfg := testConfig(p, t.TempDir(), a, log)
	cfg.HeartbeatInterval = 20 * time.Millisecond
	// The hung poll gives up after this. A request the platform answered can still time out on a
	// loaded machine and reach it again when retried: the waits below count what the inbox
	// delivered, not what the platform recorded.
	cfg.RequestTimeout = time.Second
	for _, r := range []moleculetest.Route{moleculetest.RouteRegister, moleculetest.RouteActivity, moleculetest.RouteNotify,
		moleculetest.RouteA2A, moleculetest.RouteHeartbeat} {
		p.FailNext(r, 1, 502)
	}
	p.HangNext(moleculetest.RouteActivity, 1)
	r := start(t, cfg)
	p.Enqueue(moleculetest.CanvasMessage("hi").WithSeq(1), moleculetest.PeerMessage("peer-1", "yo"), moleculetest.CanvasMessage("leak"))
	ctx := waitCtx(t)
	must(t, p.WaitFor(ctx, func() bool {
		return r.m.Stats().Delivered == 3 && len(p.Heartbeats()) >= 1 && p.CountCalls(moleculetest.RouteAck, 404) == 1
	}))
	if s := r.m.Stats(); s.DeliveryRetries < 2 || s.PollErrors < 2 || s.HeartbeatErrors < 1 {
		t.Fatalf("the failures did not happen: %+v", s)
	}
	must(t, r.stop())

	// A rejected token at register: the fatal error is logged by the cmd, so it must be clean too.
	p.FailNext(moleculetest.RouteRegister, 1, 401)
	m, err := New(testConfig(p, t.TempDir(), a, log))
	must(t, err)
	runErr := m.Run(ctx)
	if !errors.Is(runErr, ErrUnauthorized) || strings.Contains(runErr.Error(), token) {
		t.Fatalf("Run = %v", runErr)
	}
	leakReplied := false
	for _, n := range p.Notifies() {
		if strings.Contains(n.Message, token) {
			t.Errorf("the reply to the user quotes the token: %q", n.Message)
		}
		leakReplied = leakReplied || strings.Contains(n.Message, "tool printed Authorization")
	}
	if !leakReplied {
		t.Errorf("no reply tells of the codex error that quoted the token: %+v", p.Notifies())
	}

	redactedSeen := false
	for _, e := range logs.All() {
		line := entryText(e)
		if strings.Contains(line, token) {
			t.Errorf("token in log entry: %s", line)
		}
		redactedSeen = redactedSeen || strings.Contains(line, redacted)
	}
	if !redactedSeen {
		t.Fatalf("no log entry shows a redaction: the leak path was not exercised (%d entries)", logs.Len())
	}
}

func entryText(e observer.LoggedEntry) string {
	return fmt.Sprintf("%s %s %v", e.LoggerName, e.Message, e.ContextMap())
}
