package appserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/appserver/appservertest"
	"github.com/molecule-ai/codex-warm/internal/protocol"
	"github.com/molecule-ai/codex-warm/projector"
)

func TestMain(m *testing.M) {
	// The fake app-server is this test binary re-executed with FakeEnv set.
	appservertest.RunFakeIfRequested()
	goleak.VerifyTestMain(m)
}

// testLogger logs to the test and records entries for assertions.
func testLogger(t *testing.T) (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zap.DebugLevel)
	return zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), core)), logs
}

// startFake starts a client on the fake app-server in mode. edit may adjust the config.
func startFake(t *testing.T, mode string, edit func(*appserver.Config)) *appserver.Client {
	t.Helper()
	c, err := startFakeErr(t, mode, edit)
	if err != nil {
		t.Fatalf("start fake %q: %v", mode, err)
	}
	return c
}

// startFakeThread starts a fake child and a thread on it, with a minute-long context for the test.
func startFakeThread(t *testing.T, mode string, edit func(*appserver.Config)) (*appserver.Client, context.Context, string) {
	t.Helper()
	c := startFake(t, mode, edit)
	ctx := ctxTimeout(t, time.Minute)
	thread, err := c.StartThread(ctx, appserver.ThreadOptions{})
	if err != nil {
		t.Fatalf("start thread on fake %q: %v", mode, err)
	}
	return c, ctx, thread
}

func startFakeErr(t *testing.T, mode string, edit func(*appserver.Config)) (*appserver.Client, error) {
	t.Helper()
	bin, env := appservertest.FakeCommand(mode)
	log, _ := testLogger(t)
	cfg := appserver.Config{
		Bin:              bin,
		Env:              env,
		Dir:              t.TempDir(),
		HandshakeTimeout: 10 * time.Second,
		// Close waits this long for the child to exit when its stdin closes, before it signals:
		// a short grace would turn a graceful exit into a SIGTERM on a loaded machine, and
		// TestFakeCloseIsIdempotentAndConcurrent asserts the graceful one.
		CloseGrace: promptly,
		Logger:     log,
	}
	if edit != nil {
		edit(&cfg)
	}
	c, err := appserver.Start(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		assertReaped(t, c.PID())
	})
	return c, nil
}

// assertReaped fails unless pid is gone: no process, not even a zombie.
func assertReaped(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("pid %d still exists after Close (kill 0: %v)", pid, err)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
		t.Errorf("/proc/%d still exists after Close", pid)
	}
}

func text(s string) []protocol.UserInput {
	return []protocol.UserInput{{Type: "text", Text: s}}
}

// ctxTimeout is a context for one step of a test; generous because the machine is shared.
func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// agentTexts returns the texts of the completed agentMessage items among notifs.
func agentTexts(t *testing.T, notifs []protocol.Notification) []string {
	t.Helper()
	var out []string
	for _, it := range items(t, notifs, protocol.ItemAgentMessage) {
		out = append(out, it.Text)
	}
	return out
}

// items returns the completed items of type typ among notifs.
func items(t *testing.T, notifs []protocol.Notification, typ string) []protocol.Item {
	t.Helper()
	var out []protocol.Item
	for _, n := range notifs {
		if n.Method != protocol.NotifyItemCompleted {
			continue
		}
		var in protocol.ItemNotification
		if err := json.Unmarshal(n.Params, &in); err != nil {
			t.Fatalf("decode item/completed: %v", err)
		}
		it, err := protocol.DecodeItem(in.Item)
		if err != nil {
			t.Fatalf("decode item: %v", err)
		}
		if it.Type == typ {
			out = append(out, it)
		}
	}
	return out
}

// replyOf is the reply the daemon derives from a turn's raw outcome; "" for no result.
func replyOf(res *appserver.TurnResult) string {
	if res == nil {
		return ""
	}
	return projector.Project(res.Notifications).Reply
}

func methods(notifs []protocol.Notification) []string {
	out := make([]string, len(notifs))
	for i, n := range notifs {
		out[i] = n.Method
	}
	return out
}

// errTurnDeadline is the cause of a context that a test cancels when a turn reached the point
// the test is about, standing for a turn deadline that passed just then: a real deadline is a
// fixed time, which a loaded machine can reach before or after that point.
var errTurnDeadline = fmt.Errorf("turn deadline: %w", context.DeadlineExceeded)

// within fails the test when d passed since start: the "promptly" of fault tests.
func within(t *testing.T, start time.Time, d time.Duration, what string) {
	t.Helper()
	if el := time.Since(start); el > d {
		t.Errorf("%s took %s, want under %s", what, el, d)
	}
}
