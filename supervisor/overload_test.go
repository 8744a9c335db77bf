package supervisor

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/appserver/appservertest"
	"github.com/molecule-ai/codex-warm/protocol"
)

// TestProcessOverloadRetriesCounted: the default spawn counts every request its children retried
// because codex refused it as overloaded, and status shows the count; a callback the AppServer
// template set still runs.
func TestProcessOverloadRetriesCounted(t *testing.T) {
	mode := strings.Join([]string{appservertest.FakeOK,
		appservertest.FakeOverload + "=" + protocol.MethodThreadStart + ":1",
		appservertest.FakeOverload + "=" + protocol.MethodTurnStart + ":2"}, ",")
	bin, env := appservertest.FakeCommand(mode)
	var templateSaw atomic.Int64
	log := testLogger(t)
	s, err := New(Config{
		AppServer: appserver.Config{
			Bin: bin, Env: env, CloseGrace: 500 * time.Millisecond, Logger: log,
			Overload:        appserver.OverloadRetry{Initial: time.Millisecond, MaxInterval: time.Millisecond, MaxElapsed: time.Minute},
			OnOverloadRetry: func(string) { templateSaw.Add(1) },
		},
		MaxChildren:      2,
		HandshakeTimeout: 30 * time.Second,
		Logger:           log,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, s)

	r, err := s.Submit(testCtx(t), "a", "hello")
	if err != nil {
		t.Fatal(err)
	}
	if r.Text != "reply #1: hello" {
		t.Errorf("reply %q", r.Text)
	}
	if got := s.Status().Totals.OverloadRetries; got != 3 {
		t.Errorf("status counts %d overload retries, want 3 (thread/start 1, turn/start 2)", got)
	}
	if got := templateSaw.Load(); got != 3 {
		t.Errorf("the template's callback saw %d retries, want 3", got)
	}
}
