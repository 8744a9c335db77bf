package appserver_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/appserver/appservertest"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// revertsSent counts the thread/revert requests the fake read (its record file).
func revertsSent(t *testing.T, record string) int {
	t.Helper()
	b, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), `"method":"`+protocol.MethodThreadRevert+`"`)
}

// A revert that codex refuses because it still holds the thread's writer for the turn that just
// ended is sent again until codex lets go; the thread is then reverted.
func TestFakeRevertWaitsForTheWriter(t *testing.T) {
	noLeaks(t)
	record := filepath.Join(t.TempDir(), "received.jsonl")
	c := startFake(t, appservertest.FakeOK+","+appservertest.FakeRevertBusy+"=3", func(cfg *appserver.Config) {
		cfg.Env = append(cfg.Env, appservertest.FakeRecordEnv+"="+record)
	})
	ctx := ctxTimeout(t, time.Minute)
	thread, err := c.StartThread(ctx, appserver.ThreadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.RunTurn(ctx, thread, text("drop me"), appserver.TurnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.RevertThread(ctx, thread, res.TurnID); err != nil {
		t.Fatalf("revert refused three times, then accepted: %v", err)
	}
	if n := revertsSent(t, record); n != 4 {
		t.Errorf("%d thread/revert requests, want 4 (three refused)", n)
	}
}

// A writer that does not let go (another process's) ends the waiting: with the context, or
// after a few seconds at most, with an error that names the refusal, the thread and the pid.
// Other refusals are not waited for.
func TestFakeRevertGivesUpOnAHeldWriter(t *testing.T) {
	noLeaks(t)
	record := filepath.Join(t.TempDir(), "received.jsonl")
	c := startFake(t, appservertest.FakeOK+","+appservertest.FakeRevertBusy+"=1000", func(cfg *appserver.Config) {
		cfg.Env = append(cfg.Env, appservertest.FakeRecordEnv+"="+record)
	})
	thread, err := c.StartThread(ctxTimeout(t, time.Minute), appserver.ThreadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The context ends while the client waits for the writer (or, on a slow machine, while a
	// revert is on its way): the error wraps the context's and names the thread and the pid.
	ctx, cancel := context.WithTimeout(ctxTimeout(t, time.Minute), 500*time.Millisecond)
	defer cancel()
	err = c.RevertThread(ctx, thread, "turn-1")
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), thread) ||
		!strings.Contains(err.Error(), "pid "+strconv.Itoa(c.PID())) {
		t.Fatalf("error %v, want the context's, naming the thread and the pid", err)
	}
	if n := revertsSent(t, record); n < 2 {
		t.Fatalf("%d thread/revert requests, want the refused one sent again", n)
	}

	// Without an end of the context: a few seconds of refusals, then the error.
	err = c.RevertThread(ctxTimeout(t, time.Minute), thread, "turn-1")
	if err == nil || !strings.Contains(err.Error(), "already has an active writer") || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("error %v, want the refusal after the bound", err)
	}
}
