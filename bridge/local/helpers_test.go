package local

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/molecule-ai/codex-warm/appserver"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitTimeout only detects failures (a condition that never comes); nothing waits for it to pass.
// It is generous because a turn that takes a second alone takes many times that under -race on
// a loaded machine.
const waitTimeout = 2 * time.Minute

func waitCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// authErr is appserver's auth failure, as the supervisor passes it on.
var authErr = &appserver.AuthError{Msg: "credentials expired"}

// newTestLogger returns a logger that records everything (for assertions) and also prints
// warnings and errors to the test log (for debugging failures).
func newTestLogger(t *testing.T) (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.DebugLevel)
	tl := zaptest.NewLogger(t, zaptest.Level(zapcore.WarnLevel)).Core()
	return zap.New(zapcore.NewTee(core, tl)), logs
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
