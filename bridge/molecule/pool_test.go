package molecule

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// The inbox has no limit of its own on concurrent turns: sixteen chats (twice the old fixed cap
// of 8) are all in Submit at once; the answerer holds each until all are in. Only the
// supervisor's pool bounds turns.
func TestInboxAddsNoTurnLimit(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	const chats = 16
	var a *chattest.Answerer
	a = chattest.NewAnswerer(func(ctx context.Context, key, text string) (supervisor.Reply, error) {
		if err := a.WaitFor(ctx, func() bool { _, most, _, _ := a.Snapshot(); return most >= chats }); err != nil {
			return supervisor.Reply{}, err
		}
		return chattest.EchoReply(key, text), nil
	})
	log, _ := newTestLogger(t)
	start(t, testConfig(p, t.TempDir(), a, log))

	var rows []moleculetest.Row
	for c := range chats {
		rows = append(rows, moleculetest.PeerMessage(fmt.Sprintf("peer-%d", c), "hi"))
	}
	p.Enqueue(rows...)
	ctx := waitCtx(t)
	if err := p.WaitFor(ctx, func() bool { return len(p.A2ASends()) == chats }); err != nil {
		_, most, _, _ := a.Snapshot()
		t.Fatalf("%v: at most %d of %d chats were in Submit at once", err, most, chats)
	}
}

// The client New builds for the platform does not cap concurrent platform calls (a
// reply's delivery would wait for another's) and keeps enough idle connections for concurrent
// deliveries to reuse them instead of dialing again.
func TestOwnHTTPClientDoesNotCapCalls(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	m, err := New(testConfig(p, t.TempDir(), chattest.NewAnswerer(nil), nil))
	must(t, err)
	tr, ok := m.ownHTTP.Transport.(*http.Transport)
	if !ok {
		t.Fatalf("transport is %T", m.ownHTTP.Transport)
	}
	if tr.MaxConnsPerHost != 0 || tr.MaxIdleConnsPerHost < platformIdleConns {
		t.Errorf("MaxConnsPerHost = %d, MaxIdleConnsPerHost = %d; want no cap and %d idle", tr.MaxConnsPerHost, tr.MaxIdleConnsPerHost, platformIdleConns)
	}
}
