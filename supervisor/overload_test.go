package supervisor

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/appserver/appservertest"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// TestProcessOverloadRetriesCounted: the default spawn counts every request its children retried
// because codex refused it as overloaded, and status shows the count; a callback the AppServer
// template set still runs.
func TestProcessOverloadRetriesCounted(t *testing.T) {
	t.Parallel()
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

// TestProcessOverloadPastTheBound: a turn/start codex keeps refusing past the retry bound fails
// the message with ErrOverloaded (the bridge answers busy), but the child stays warm: the next
// message runs on it as the thread's first turn.
func TestProcessOverloadPastTheBound(t *testing.T) {
	t.Parallel()
	bin, env := appservertest.FakeCommand(appservertest.FakeOK + "," + appservertest.FakeOverload + "=" + protocol.MethodTurnStart + ":3")
	log := testLogger(t)
	s, err := New(Config{
		AppServer: appserver.Config{
			Bin: bin, Env: env, CloseGrace: 500 * time.Millisecond, Logger: log,
			Overload: appserver.OverloadRetry{Initial: time.Millisecond, MaxInterval: time.Millisecond, MaxElapsed: time.Minute,
				MaxRetries: 2},
		},
		MaxChildren:      2,
		HandshakeTimeout: 30 * time.Second,
		Logger:           log,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, s)
	ctx := testCtx(t)

	r, err := s.Submit(ctx, "a", "refused")
	if !errors.Is(err, appserver.ErrOverloaded) {
		t.Fatalf("reply %+v error %v, want ErrOverloaded", r, err)
	}
	st := s.Status()
	if st.Totals.OverloadRetries != 2 || st.Totals.Live != 1 || st.Children[0].State != StateIdle || len(st.Totals.Retired) != 0 {
		t.Fatalf("after the refusals: %+v %+v, want 2 retries and the child idle", st.Totals, st.Children)
	}
	pid := st.Children[0].PID
	r, err = s.Submit(ctx, "a", "accepted")
	if err != nil {
		t.Fatal(err)
	}
	if r.Text != "reply #1: accepted" || r.PID != pid {
		t.Errorf("reply %q from pid %d, want the first turn on pid %d", r.Text, r.PID, pid)
	}
}
