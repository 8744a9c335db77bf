package appserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/appserver/appservertest"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// noLeaks checks, after the test's cleanups (Close) ran, that the test left no goroutine behind.
// Register it before anything else so that its cleanup runs last.
func noLeaks(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// promptly is the bound for "returns at once" in fault tests. It is a hang guard, not a speed
// target: what a test proves about the path taken, it proves by the error or by making the slow
// path take longer than this (the minute-long contexts of startFakeThread). Below those, it is
// generous for a loaded machine.
const promptly = 30 * time.Second

func TestFakeTurnsCountHistoryAndStreamInOrder(t *testing.T) {
	noLeaks(t)
	c := startFake(t, appservertest.FakeOK, nil)
	ctx := ctxTimeout(t, 30*time.Second)
	thread, err := c.StartThread(ctx, appserver.ThreadOptions{Cwd: t.TempDir(), ApprovalPolicy: "never"})
	if err != nil {
		t.Fatal(err)
	}
	before := c.LastActivity()
	for i, msg := range []string{"first", "second"} {
		var seen []protocol.Notification
		res, err := c.RunTurn(ctx, thread, text(msg), appserver.TurnOptions{
			OnNotification: func(n protocol.Notification) { seen = append(seen, n) },
		})
		if err != nil {
			t.Fatalf("turn %d: %v", i+1, err)
		}
		want := fmt.Sprintf("reply #%d: %s", i+1, msg)
		if res.Status != protocol.TurnCompleted || replyOf(res) != want {
			t.Errorf("turn %d: status %q reply %q, want completed %q", i+1, res.Status, replyOf(res), want)
		}
		if res.ThreadID != thread || res.TurnID == "" || res.Duration <= 0 {
			t.Errorf("turn %d: thread %q turn %q duration %s", i+1, res.ThreadID, res.TurnID, res.Duration)
		}
		// The callback saw exactly the result's notifications, in the same order.
		if !slices.Equal(methods(seen), methods(res.Notifications)) {
			t.Errorf("callback saw %v, result has %v", methods(seen), methods(res.Notifications))
		}
		wantMethods := []string{
			protocol.NotifyThreadStatus, protocol.NotifyTurnStarted,
			protocol.NotifyItemStarted, protocol.NotifyItemCompleted, // user message
			protocol.NotifyItemStarted, protocol.NotifyAgentMessageDelta, protocol.NotifyItemCompleted,
			protocol.NotifyTokenUsageUpdated, protocol.NotifyThreadStatus, protocol.NotifyTurnCompleted,
		}
		if got := methods(res.Notifications); !slices.Equal(got, wantMethods) {
			t.Errorf("turn %d notifications %v, want %v", i+1, got, wantMethods)
		}
	}
	if !c.LastActivity().After(before) {
		t.Errorf("LastActivity %s did not advance past %s", c.LastActivity(), before)
	}
	select {
	case <-c.Done():
		t.Fatalf("Done closed on a healthy client: %v", c.Err())
	default:
	}
	if c.Err() != nil {
		t.Errorf("Err on a healthy client: %v", c.Err())
	}
}

func TestFakeEarlyNotificationsAreBufferedAndFiltered(t *testing.T) {
	noLeaks(t)
	c, ctx, thread := startFakeThread(t, appservertest.FakeEarlyNotify, nil)
	var seen []protocol.Notification
	res, err := c.RunTurn(ctx, thread, text("early"), appserver.TurnOptions{
		OnNotification: func(n protocol.Notification) { seen = append(seen, n) },
	})
	if err != nil {
		t.Fatal(err)
	}
	// turn/started came before the turn/start response and must still be delivered, first;
	// the other thread's notifications and the stale turn's item must not.
	got := methods(res.Notifications)
	if len(got) == 0 || got[0] != protocol.NotifyTurnStarted {
		t.Fatalf("notifications %v, want turn/started first", got)
	}
	if texts := agentTexts(t, res.Notifications); !slices.Equal(texts, []string{"reply #1: early"}) {
		t.Errorf("agent messages %q: the stale turn's message leaked in", texts)
	}
	if n := strings.Count(strings.Join(got, " "), protocol.NotifyTurnCompleted); n != 1 {
		t.Errorf("%d turn/completed in %v, want only this turn's", n, got)
	}
	for _, n := range res.Notifications {
		if !strings.Contains(string(n.Params), thread) {
			t.Errorf("notification %s of another thread delivered: %s", n.Method, n.Params)
		}
	}
	if !slices.Equal(methods(seen), got) {
		t.Errorf("callback saw %v, result has %v", methods(seen), got)
	}
}

func TestFakeRetryErrorDoesNotEndTurn(t *testing.T) {
	noLeaks(t)
	c, ctx, thread := startFakeThread(t, appservertest.FakeRetryError, nil)
	res, err := c.RunTurn(ctx, thread, text("hi"), appserver.TurnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != protocol.TurnCompleted || replyOf(res) != "reply #1: hi" {
		t.Errorf("status %q reply %q: the willRetry error ended the turn", res.Status, replyOf(res))
	}
	if !slices.Contains(methods(res.Notifications), protocol.NotifyError) {
		t.Errorf("the error notification is missing from %v", methods(res.Notifications))
	}
}

func TestFakeFailedTurnIsAResult(t *testing.T) {
	noLeaks(t)
	c, ctx, thread := startFakeThread(t, appservertest.FakeFail, nil)
	res, err := c.RunTurn(ctx, thread, text("hi"), appserver.TurnOptions{})
	if err != nil {
		t.Fatalf("a failed turn is a result, got error %v", err)
	}
	if res.Status != protocol.TurnFailed || res.Error == nil || res.Error.Message != appservertest.FakeFailMessage {
		t.Errorf("status %q error %+v", res.Status, res.Error)
	}
}

func TestFakeAuthFailureBecomesAuthError(t *testing.T) {
	noLeaks(t)
	c, ctx, thread := startFakeThread(t, appservertest.FakeAuthFail, nil)
	res, err := c.RunTurn(ctx, thread, text("hi"), appserver.TurnOptions{})
	var ae *appserver.AuthError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v, want *AuthError", err)
	}
	if !strings.Contains(err.Error(), "codex login") || !strings.Contains(ae.Msg, "401") {
		t.Errorf("auth error %q does not tell the operator to run codex login with the cause", err)
	}
	if res == nil || res.Status != protocol.TurnFailed {
		t.Errorf("result %+v, want the failed turn alongside the error", res)
	}
}

func TestFakeExitDuringHandshake(t *testing.T) {
	noLeaks(t)
	start := time.Now()
	_, err := startFakeErr(t, appservertest.FakeExitHandshake, nil)
	within(t, start, promptly, "Start against a child that exits")
	var ee *appserver.ExitError
	if !errors.Is(err, appserver.ErrChildExited) || !errors.As(err, &ee) {
		t.Fatalf("error %v, want an *ExitError wrapping ErrChildExited", err)
	}
	// Start noticed the exit; it did not wait out the handshake timeout.
	if errors.Is(err, appserver.ErrHandshakeTimeout) {
		t.Errorf("error %v: Start waited for the handshake timeout instead of seeing the exit", err)
	}
	if ee.Code != 3 || !strings.Contains(ee.StderrTail, "exiting during handshake") {
		t.Errorf("exit code %d, stderr tail %q", ee.Code, ee.StderrTail)
	}
	if !strings.Contains(err.Error(), "exiting during handshake") {
		t.Errorf("error %q lacks the stderr tail", err)
	}
	assertReaped(t, ee.PID)
}

func TestFakeHandshakeTimeout(t *testing.T) {
	noLeaks(t)
	bin, env := appservertest.FakeCommand(appservertest.FakeSlowStart)
	log, logs := testLogger(t)
	start := time.Now()
	// The handshake times out whether or not the fake has even started by then. Close then waits
	// for it to exit by itself when its stdin closes (a slow-start fake still reads stdin), not
	// for a grace that a slow start could outlast: so its first stderr line is always in the tail.
	_, err := appserver.Start(context.Background(), appserver.Config{
		Bin: bin, Env: env, HandshakeTimeout: 300 * time.Millisecond, CloseGrace: promptly, Logger: log,
	})
	within(t, start, promptly, "Start with a handshake timeout")
	if !errors.Is(err, appserver.ErrHandshakeTimeout) {
		t.Fatalf("error %v, want ErrHandshakeTimeout", err)
	}
	if !strings.Contains(err.Error(), "fake app-server: pid") {
		t.Errorf("error %q lacks the stderr tail", err)
	}
	started := logs.FilterMessage("codex app-server started").All()
	if len(started) != 1 {
		t.Fatalf("%d start log entries", len(started))
	}
	assertReaped(t, int(started[0].ContextMap()["pid"].(int64)))
}

func TestFakeCallerContextBoundsHandshake(t *testing.T) {
	noLeaks(t)
	bin, env := appservertest.FakeCommand(appservertest.FakeSlowStart)
	ctx, cancel := context.WithCancelCause(context.Background())
	errStop := errors.New("daemon stopping")
	cancel(errStop)
	_, err := appserver.Start(ctx, appserver.Config{Bin: bin, Env: env, CloseGrace: 300 * time.Millisecond})
	if !errors.Is(err, errStop) {
		t.Fatalf("error %v, want the context's cause", err)
	}
}

func TestFakeExitMidTurn(t *testing.T) {
	noLeaks(t)
	c, ctx, thread := startFakeThread(t, appservertest.FakeExitMidTurn, nil)
	start := time.Now()
	_, err := c.RunTurn(ctx, thread, text("hi"), appserver.TurnOptions{})
	within(t, start, promptly, "RunTurn on a child that dies")
	var ee *appserver.ExitError
	if !errors.Is(err, appserver.ErrChildExited) || !errors.As(err, &ee) {
		t.Fatalf("error %v, want an *ExitError wrapping ErrChildExited", err)
	}
	if ee.Code != 2 || !strings.Contains(ee.StderrTail, "dying mid-turn") || ee.PID != c.PID() {
		t.Errorf("exit %+v", ee)
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("Done not closed after the child died")
	}
	if !errors.Is(c.Err(), appserver.ErrChildExited) {
		t.Errorf("Err %v", c.Err())
	}
	if st := c.ExitStatus(); st == nil || st.ExitCode() != 2 {
		t.Errorf("exit status %v", st)
	}
	// A dead client fails further work at once.
	if _, err := c.RunTurn(ctx, thread, text("again"), appserver.TurnOptions{}); !errors.Is(err, appserver.ErrChildExited) {
		t.Errorf("RunTurn after death: %v", err)
	}
	if _, err := c.StartThread(ctx, appserver.ThreadOptions{}); !errors.Is(err, appserver.ErrChildExited) {
		t.Errorf("StartThread after death: %v", err)
	}
}

func TestFakeGarbageLineBreaksStream(t *testing.T) {
	noLeaks(t)
	c, ctx, thread := startFakeThread(t, appservertest.FakeGarbage, nil)
	start := time.Now()
	_, err := c.RunTurn(ctx, thread, text("hi"), appserver.TurnOptions{})
	within(t, start, promptly, "RunTurn on a child that writes garbage")
	if !errors.Is(err, appserver.ErrProtocol) || !errors.Is(err, appserver.ErrChildExited) {
		t.Fatalf("error %v, want ErrProtocol and ErrChildExited", err)
	}
	if !strings.Contains(err.Error(), "this is not JSON") {
		t.Errorf("error %q does not show the offending line", err)
	}
	<-c.Done()
}

// TestFakeHugeLineWithinLimitIsAccepted has no wall-clock bound on its turn: writing, reading and
// decoding the 10 MiB line costs seconds of CPU under -race, which a loaded machine stretches
// past any bound. A hang still fails, by go test's -timeout.
func TestFakeHugeLineWithinLimitIsAccepted(t *testing.T) {
	noLeaks(t)
	c := startFake(t, appservertest.FakeHugeLine, nil)
	thread, err := c.StartThread(t.Context(), appserver.ThreadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.RunTurn(t.Context(), thread, text("big"), appserver.TurnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != protocol.TurnCompleted || replyOf(res) != "reply #1: big" {
		t.Errorf("status %q reply %q", res.Status, replyOf(res))
	}
	var biggest int
	for _, n := range res.Notifications {
		biggest = max(biggest, len(n.Params))
	}
	if biggest < appservertest.FakeHugeLineBytes {
		t.Errorf("largest notification has %d bytes, want the 10 MiB delta", biggest)
	}
}

func TestFakeLineOverLimitIsProtocolError(t *testing.T) {
	noLeaks(t)
	c, ctx, thread := startFakeThread(t, appservertest.FakeHugeLine, func(cfg *appserver.Config) { cfg.MaxLineBytes = 1 << 20 })
	start := time.Now()
	_, err := c.RunTurn(ctx, thread, text("big"), appserver.TurnOptions{})
	within(t, start, promptly, "RunTurn on a child that writes an oversized line")
	if !errors.Is(err, appserver.ErrLineTooLong) || !errors.Is(err, appserver.ErrChildExited) {
		t.Fatalf("error %v, want ErrLineTooLong and ErrChildExited", err)
	}
}

func TestFakeDeadlineInterruptsAndNextTurnWorks(t *testing.T) {
	noLeaks(t)
	// The first turn never completes by itself, so only the deadline can end it, however late
	// the turn gets going on a loaded machine; the next turn completes.
	c, ctx, thread := startFakeThread(t, appservertest.FakeOK+","+appservertest.FakeHangFirst, nil)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	res, err := c.RunTurn(short, thread, text("slow"), appserver.TurnOptions{InterruptGrace: promptly})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want the deadline as cause", err)
	}
	if res == nil || res.Status != protocol.TurnInterrupted {
		t.Fatalf("result %+v, want status interrupted", res)
	}
	res, err = c.RunTurn(ctx, thread, text("next"), appserver.TurnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != protocol.TurnCompleted || replyOf(res) != "reply #2: next" {
		t.Errorf("after the interrupt: status %q reply %q", res.Status, replyOf(res))
	}
}

func TestFakeCancelCauseIsReported(t *testing.T) {
	noLeaks(t)
	c, ctx, thread := startFakeThread(t, appservertest.FakeNoComplete, nil)
	errShutdown := errors.New("shutting down")
	tctx, cancel := context.WithCancelCause(ctx)
	res, err := c.RunTurn(tctx, thread, text("hi"), appserver.TurnOptions{
		OnNotification: func(n protocol.Notification) {
			if n.Method == protocol.NotifyTurnStarted {
				cancel(errShutdown)
			}
		},
	})
	if !errors.Is(err, errShutdown) {
		t.Fatalf("error %v, want the cancel cause", err)
	}
	if res == nil || res.Status != protocol.TurnInterrupted {
		t.Errorf("result %+v, want interrupted", res)
	}
}

func TestFakeCancelBeforeTurnIDStillInterrupts(t *testing.T) {
	noLeaks(t)
	c, ctx, thread := startFakeThread(t, appservertest.FakeNoComplete+","+appservertest.FakeSlowTurnStart+"=500", nil)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	res, err := c.RunTurn(short, thread, text("hi"), appserver.TurnOptions{InterruptGrace: 10 * time.Second})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want the deadline", err)
	}
	if res == nil || res.Status != protocol.TurnInterrupted || res.TurnID == "" {
		t.Fatalf("result %+v: the turn started after the deadline must be interrupted, not left running", res)
	}
}

func TestFakeIgnoredInterruptIsWedged(t *testing.T) {
	noLeaks(t)
	c, ctx, thread := startFakeThread(t, appservertest.FakeIgnoreInterrupt, nil)
	// The deadline passes once the turn has started, not after a fixed time: a fixed one could
	// pass before the turn/start response on a loaded machine, and the short grace would then
	// run out waiting for the turn id instead of for the interrupt this test is about.
	short, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	start := time.Now()
	res, err := c.RunTurn(short, thread, text("hi"), appserver.TurnOptions{
		InterruptGrace: 300 * time.Millisecond,
		OnNotification: func(n protocol.Notification) {
			if n.Method == protocol.NotifyTurnStarted {
				cancel(errTurnDeadline)
			}
		},
	})
	within(t, start, promptly, "RunTurn past the interrupt grace")
	if !errors.Is(err, appserver.ErrWedged) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want ErrWedged wrapping the deadline", err)
	}
	if res == nil || res.TurnID == "" || res.Status != "" {
		t.Errorf("partial result %+v", res)
	}
	// The child still has the turn: no more turns on it.
	if _, err := c.RunTurn(ctx, thread, text("again"), appserver.TurnOptions{}); !errors.Is(err, appserver.ErrWedged) {
		t.Errorf("RunTurn on a wedged child: %v", err)
	}
}

func TestFakeQuietAfterToolStreamsToolItem(t *testing.T) {
	noLeaks(t)
	c, ctx, thread := startFakeThread(t, appservertest.FakeQuietAfterTool, nil)
	// A post-tool watchdog sees the tool result through the callback and cancels the turn.
	tctx, cancel := context.WithCancelCause(ctx)
	errQuiet := errors.New("quiet after tool")
	res, err := c.RunTurn(tctx, thread, text("hi"), appserver.TurnOptions{
		OnNotification: func(n protocol.Notification) {
			if n.Method == protocol.NotifyItemCompleted && strings.Contains(string(n.Params), protocol.ItemCommandExecution) {
				cancel(errQuiet)
			}
		},
	})
	if !errors.Is(err, errQuiet) || res == nil || res.Status != protocol.TurnInterrupted {
		t.Fatalf("result %+v error %v", res, err)
	}
	if got := items(t, res.Notifications, protocol.ItemCommandExecution); len(got) != 1 || got[0].Status != "completed" {
		t.Errorf("command items %+v", got)
	}
}

func TestFakeApprovalPolicies(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mode   string
		policy appserver.Policy
		want   string
		status string
	}{
		{"default declines", appservertest.FakeApproval, appserver.DefaultPolicy(), "decision: decline", "declined"},
		{"zero value declines", appservertest.FakeApproval, appserver.Policy{}, "decision: decline", "declined"},
		{"accept", appservertest.FakeApproval, appserver.AcceptPolicy(), "decision: accept", "completed"},
		{"accept not offered", appservertest.FakeApproval + ",approval-offer=decline+cancel", appserver.AcceptPolicy(), "decision: decline", "declined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			noLeaks(t)
			c := startFake(t, tc.mode, func(cfg *appserver.Config) { cfg.Policy = tc.policy })
			ctx := ctxTimeout(t, time.Minute)
			thread, err := c.StartThread(ctx, appserver.ThreadOptions{ApprovalPolicy: "untrusted"})
			if err != nil {
				t.Fatal(err)
			}
			// The fake sends the request with id 0; a wrong or missing answer hangs the turn
			// until ctx ends.
			res, err := c.RunTurn(ctx, thread, text("run something"), appserver.TurnOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != protocol.TurnCompleted || replyOf(res) != tc.want {
				t.Errorf("status %q reply %q, want %q", res.Status, replyOf(res), tc.want)
			}
			cmds := items(t, res.Notifications, protocol.ItemCommandExecution)
			if len(cmds) != 1 || cmds[0].Status != tc.status {
				t.Errorf("command items %+v, want one %s", cmds, tc.status)
			}
			if !slices.Contains(methods(res.Notifications), protocol.NotifyServerRequestClear) {
				t.Errorf("no serverRequest/resolved in %v", methods(res.Notifications))
			}
		})
	}
}

func TestFakeResumeUnknownThread(t *testing.T) {
	noLeaks(t)
	c := startFake(t, appservertest.FakeUnknownThread, nil)
	err := c.ResumeThread(ctxTimeout(t, time.Minute), "0199a000-0000-7000-8000-000000000000", appserver.ThreadOptions{})
	if !errors.Is(err, appserver.ErrThreadNotFound) {
		t.Fatalf("error %v, want ErrThreadNotFound", err)
	}
	if !strings.Contains(err.Error(), "no rollout found") {
		t.Errorf("error %q lacks codex's message", err)
	}
}

func TestFakeTurnOnUnknownThread(t *testing.T) {
	noLeaks(t)
	c := startFake(t, appservertest.FakeOK, nil)
	_, err := c.RunTurn(ctxTimeout(t, time.Minute), "0199a000-0000-7000-8000-000000000002", text("hi"), appserver.TurnOptions{})
	if !errors.Is(err, appserver.ErrThreadNotFound) {
		t.Fatalf("error %v, want ErrThreadNotFound", err)
	}
	// The refused turn does not occupy the turn slot.
	thread, err := c.StartThread(ctxTimeout(t, time.Minute), appserver.ThreadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.RunTurn(ctxTimeout(t, time.Minute), thread, text("hi"), appserver.TurnOptions{}); err != nil {
		t.Errorf("turn after the refused one: %v", err)
	}
}

func TestFakeResumeKnownThread(t *testing.T) {
	noLeaks(t)
	record := filepath.Join(t.TempDir(), "received.jsonl")
	c := startFake(t, appservertest.FakeOK, func(cfg *appserver.Config) {
		cfg.Env = append(cfg.Env, appservertest.FakeRecordEnv+"="+record)
	})
	ctx := ctxTimeout(t, time.Minute)
	const id = "0199a000-0000-7000-8000-000000000001"
	if err := c.ResumeThread(ctx, id, appserver.ThreadOptions{Cwd: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	// The fake keeps no history across processes.
	if last, ok, err := c.LastTurn(ctx, id); err != nil || ok {
		t.Errorf("last turn %+v ok %v err %v, want none", last, ok, err)
	}
	res, err := c.RunTurn(ctx, id, text("back"), appserver.TurnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if replyOf(res) != "reply #1: back" {
		t.Errorf("reply %q", replyOf(res))
	}

	// The wire shapes: resume without full-history hydration; the newest turn only.
	sent := map[string]map[string]any{}
	b, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		var m struct {
			Method string         `json:"method"`
			Params map[string]any `json:"params"`
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("recorded line %q: %v", line, err)
		}
		sent[m.Method] = m.Params
	}
	if p := sent[protocol.MethodThreadResume]; p["threadId"] != id || p["excludeTurns"] != true {
		t.Errorf("thread/resume params %v, want excludeTurns true", p)
	}
	want := map[string]any{"threadId": id, "limit": float64(1), "sortDirection": "desc"}
	if p := sent[protocol.MethodThreadTurns]; !maps.Equal(p, want) {
		t.Errorf("thread/turns/list params %v, want %v", p, want)
	}
}

func TestFakeSecondConcurrentTurnIsRefused(t *testing.T) {
	noLeaks(t)
	c, ctx, thread := startFakeThread(t, appservertest.FakeNoComplete, nil)
	first, cancelFirst := context.WithCancel(ctx)
	defer cancelFirst()
	started := make(chan struct{})
	var once sync.Once
	type outcome struct {
		res *appserver.TurnResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := c.RunTurn(first, thread, text("long"), appserver.TurnOptions{
			OnNotification: func(n protocol.Notification) {
				if n.Method == protocol.NotifyTurnStarted {
					once.Do(func() { close(started) })
				}
			},
		})
		done <- outcome{res, err}
	}()
	<-started
	start := time.Now()
	_, err := c.RunTurn(ctx, thread, text("second"), appserver.TurnOptions{})
	within(t, start, promptly, "the refused second RunTurn")
	if !errors.Is(err, appserver.ErrTurnInProgress) {
		t.Fatalf("second RunTurn: %v, want ErrTurnInProgress", err)
	}
	cancelFirst()
	o := <-done
	if !errors.Is(o.err, context.Canceled) || o.res == nil || o.res.Status != protocol.TurnInterrupted {
		t.Errorf("first turn: %+v %v", o.res, o.err)
	}
	// The slot is free again.
	if _, err := c.RunTurn(ctxTimeout(t, 200*time.Millisecond), thread, text("third"), appserver.TurnOptions{InterruptGrace: 5 * time.Second}); errors.Is(err, appserver.ErrTurnInProgress) {
		t.Errorf("third RunTurn still refused: %v", err)
	}
}

func TestFakeDieAfterTurn(t *testing.T) {
	noLeaks(t)
	c, ctx, thread := startFakeThread(t, appservertest.FakeOK+","+appservertest.FakeDieAfter+"=1", nil)
	// The child writes turn/completed and exits at once: the turn still counts.
	res, err := c.RunTurn(ctx, thread, text("last"), appserver.TurnOptions{})
	if err != nil {
		t.Fatalf("the completed turn before the exit: %v", err)
	}
	if replyOf(res) != "reply #1: last" {
		t.Errorf("reply %q", replyOf(res))
	}
	select {
	case <-c.Done():
	case <-ctx.Done():
		t.Fatal("Done not closed after the child exited")
	}
	var ee *appserver.ExitError
	if !errors.As(c.Err(), &ee) || ee.Code != 0 || !strings.Contains(ee.StderrTail, "exiting after 1 turns") {
		t.Errorf("Err %v", c.Err())
	}
	start := time.Now()
	if _, err := c.RunTurn(ctx, thread, text("more"), appserver.TurnOptions{}); !errors.Is(err, appserver.ErrChildExited) {
		t.Errorf("RunTurn on the exited child: %v", err)
	}
	within(t, start, promptly, "RunTurn on an exited child")
}

func TestFakeCloseDuringTurn(t *testing.T) {
	noLeaks(t)
	c, ctx, thread := startFakeThread(t, appservertest.FakeNoComplete, nil)
	started := make(chan struct{})
	var once sync.Once
	errc := make(chan error, 1)
	go func() {
		_, err := c.RunTurn(ctx, thread, text("long"), appserver.TurnOptions{
			OnNotification: func(n protocol.Notification) {
				if n.Method == protocol.NotifyTurnStarted {
					once.Do(func() { close(started) })
				}
			},
		})
		errc <- err
	}()
	<-started
	start := time.Now()
	if err := c.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if err := <-errc; !errors.Is(err, appserver.ErrClosed) {
		t.Errorf("RunTurn during Close: %v, want ErrClosed", err)
	}
	within(t, start, promptly, "Close with a turn in flight")
	if !errors.Is(c.Err(), appserver.ErrClosed) {
		t.Errorf("Err after Close: %v", c.Err())
	}
}

func TestFakeCloseEscalatesToSIGKILL(t *testing.T) {
	noLeaks(t)
	log, logs := testLogger(t)
	c := startFake(t, appservertest.FakeStubborn, func(cfg *appserver.Config) {
		cfg.CloseGrace = 200 * time.Millisecond
		cfg.Logger = log
	})
	start := time.Now()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	within(t, start, promptly, "Close of a stubborn child")
	assertReaped(t, c.PID())
	st := c.ExitStatus()
	if st == nil {
		t.Fatal("no exit status after Close")
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("exit status %v, want killed by SIGKILL", st)
	}
	closed := logs.FilterMessage("codex app-server closed").All()
	if len(closed) != 1 || closed[0].ContextMap()["how"] != "killed with SIGKILL" {
		t.Errorf("close log %+v", closed)
	}
}

func TestFakeCloseIsIdempotentAndConcurrent(t *testing.T) {
	noLeaks(t)
	c := startFake(t, appservertest.FakeOK, nil)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := c.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		})
	}
	wg.Wait()
	assertReaped(t, c.PID())
	if st := c.ExitStatus(); st == nil || !st.Success() {
		t.Errorf("graceful close: exit status %v, want 0 after stdin EOF; stderr %s", st, c.StderrTail())
	}
	if _, err := c.StartThread(context.Background(), appserver.ThreadOptions{}); !errors.Is(err, appserver.ErrClosed) {
		t.Errorf("StartThread after Close: %v", err)
	}
}

func TestFakeStartErrors(t *testing.T) {
	noLeaks(t)
	if _, err := appserver.Start(context.Background(), appserver.Config{}); err == nil {
		t.Error("Start without Bin succeeded")
	}
	_, err := appserver.Start(context.Background(), appserver.Config{Bin: "/nonexistent/codex"})
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Start of a missing binary: %v", err)
	}
}

func TestFakeEnvAndOverrides(t *testing.T) {
	noLeaks(t)
	// The fake reports CODEX_HOME as codexHome in initialize; the test checks the plumbing
	// through the start log instead of poking at the child.
	log, logs := testLogger(t)
	home := t.TempDir()
	c := startFake(t, appservertest.FakeOK, func(cfg *appserver.Config) {
		cfg.CodexHome = home
		cfg.ConfigOverrides = []string{`model="x"`}
		cfg.Logger = log
	})
	entry := logs.FilterMessage("codex app-server started").All()
	if len(entry) != 1 {
		t.Fatalf("%d start log entries", len(entry))
	}
	args := fmt.Sprint(entry[0].ContextMap()["args"])
	if args != `[-c model="x" app-server]` {
		t.Errorf("args %s", args)
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", c.PID()))
	if err != nil {
		t.Fatal(err)
	}
	vars := strings.Split(string(environ), "\x00")
	if !slices.Contains(vars, "CODEX_HOME="+home) {
		t.Errorf("child env lacks CODEX_HOME=%s", home)
	}
	if h := os.Getenv("HOME"); h != "" && !slices.Contains(vars, "HOME="+h) {
		t.Errorf("child env lacks HOME=%s", h)
	}
	// Own process group.
	pgid, err := syscall.Getpgid(c.PID())
	if err != nil || pgid != c.PID() {
		t.Errorf("pgid %d (%v), want %d", pgid, err, c.PID())
	}
}

// TestFakeInterruptBeforeCodexRegisteredTheTurn: codex answers turn/start before it registers
// the turn, and refuses a turn/interrupt in between with -32600 "no active turn to interrupt"
// (FakeLateStart refuses the first one every time). The interrupt is sent again once the turn
// has started, and the turn ends interrupted well within the grace; the child takes more turns.
func TestFakeInterruptBeforeCodexRegisteredTheTurn(t *testing.T) {
	noLeaks(t)
	c, ctx, thread := startFakeThread(t, appservertest.FakeLateStart, nil)
	for i := range 3 {
		tctx, cancel := context.WithCancel(ctx)
		res, err := c.RunTurn(tctx, thread, text("stop me"), appserver.TurnOptions{
			OnStarted: func(string) { cancel() },
			// Only a lost interrupt waits this out.
			InterruptGrace: promptly,
		})
		cancel()
		if !errors.Is(err, context.Canceled) || errors.Is(err, appserver.ErrWedged) {
			t.Fatalf("turn %d: error %v, want context.Canceled and not wedged", i, err)
		}
		if res == nil || res.Status != protocol.TurnInterrupted {
			t.Fatalf("turn %d: result %+v, want interrupted", i, res)
		}
	}
}
