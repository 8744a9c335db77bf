package appserver_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/appserver/appservertest"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// realEnv is real codex pointed at a mock model, with its own CODEX_HOME and workspace.
type realEnv struct {
	bin  string
	mock *mockmodel.Model
	home string
	cwd  string
}

func newRealEnv(t *testing.T, cfg mockmodel.Config) *realEnv {
	t.Helper()
	bin := appservertest.CodexBin(t)
	mock, err := mockmodel.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Registered before any client's cleanup, so it runs after them: codex may still be
	// talking to the mock until it is closed.
	t.Cleanup(func() {
		if err := mock.Close(); err != nil {
			t.Errorf("mock close: %v", err)
		}
		if u := mock.Unhandled(); len(u) > 0 {
			t.Errorf("codex made requests the mock does not serve: %v", u)
		}
	})
	e := &realEnv{bin: bin, mock: mock, home: t.TempDir(), cwd: t.TempDir()}
	if err := mock.WriteCodexHome(e.home); err != nil {
		t.Fatal(err)
	}
	return e
}

// start starts a real codex app-server child; edit may adjust the config.
func (e *realEnv) start(t *testing.T, edit func(*appserver.Config)) *appserver.Client {
	t.Helper()
	log, _ := testLogger(t)
	cfg := appserver.Config{
		Bin:        e.bin,
		CodexHome:  e.home,
		Dir:        e.cwd,
		ClientInfo: protocol.ClientInfo{Name: "codex-warm-test", Version: "0.0.0"},
		Logger:     log,
		// A HOME of the test's own: the sandboxed shells codex runs may source ~/.bashrc (see
		// appservertest's isolateShell), and the machine's profile has no place in a tool's output.
		Env: append(os.Environ(), "HOME="+t.TempDir(), "BASH_ENV=", "ENV="),
	}
	if edit != nil {
		edit(&cfg)
	}
	c, err := appserver.Start(ctxTimeout(t, time.Minute), cfg)
	if err != nil {
		t.Fatalf("start codex: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		assertReaped(t, c.PID())
	})
	return c
}

// startRealThread starts real codex against a fresh mock model and a thread with the approval
// policy, under a two-minute context.
func startRealThread(t *testing.T, approval string) (*realEnv, *appserver.Client, context.Context, string) {
	t.Helper()
	e := newRealEnv(t, mockmodel.Config{})
	c := e.start(t, nil)
	ctx := ctxTimeout(t, 2*time.Minute)
	thread, err := c.StartThread(ctx, e.threadOpts(approval))
	if err != nil {
		t.Fatalf("start thread: %v (stderr: %s)", err, c.StderrTail())
	}
	return e, c, ctx, thread
}

func (e *realEnv) threadOpts(approval string) appserver.ThreadOptions {
	return appserver.ThreadOptions{Cwd: e.cwd, ApprovalPolicy: approval, Sandbox: "read-only"}
}

func mustTurn(t *testing.T, c *appserver.Client, ctx context.Context, thread, msg string) *appserver.TurnResult {
	t.Helper()
	res, err := c.RunTurn(ctx, thread, text(msg), appserver.TurnOptions{})
	if err != nil {
		t.Fatalf("turn %q: %v (stderr: %s)", msg, err, c.StderrTail())
	}
	return res
}

// mustComplete is mustTurn for a turn that must complete.
func mustComplete(t *testing.T, c *appserver.Client, ctx context.Context, thread, msg string) *appserver.TurnResult {
	t.Helper()
	res := mustTurn(t, c, ctx, thread, msg)
	if res.Status != protocol.TurnCompleted {
		t.Fatalf("turn %q: status %q, want completed (error %+v)", msg, res.Status, res.Error)
	}
	return res
}

func TestRealTwoTurnsOnOneThreadKeepHistory(t *testing.T) {
	noLeaks(t)
	e, c, ctx, thread := startRealThread(t, "never")
	r1 := mustTurn(t, c, ctx, thread, "first message")
	r2 := mustTurn(t, c, ctx, thread, "second message")
	if r1.Status != protocol.TurnCompleted || replyOf(r1) != "reply #1: first message" {
		t.Errorf("turn 1: status %q reply %q", r1.Status, replyOf(r1))
	}
	if r2.Status != protocol.TurnCompleted || replyOf(r2) != "reply #2: second message" {
		t.Errorf("turn 2: status %q reply %q", r2.Status, replyOf(r2))
	}
	if r1.TurnID == r2.TurnID || r1.ThreadID != thread || r2.ThreadID != thread {
		t.Errorf("ids: %s/%s %s/%s", r1.ThreadID, r1.TurnID, r2.ThreadID, r2.TurnID)
	}
	reqs := e.mock.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	if !slices.Equal(reqs[1].UserTexts, []string{"first message", "second message"}) {
		t.Errorf("second model request carried user texts %q, want both turns", reqs[1].UserTexts)
	}
}

func TestRealOptOutNotifications(t *testing.T) {
	noLeaks(t)
	e := newRealEnv(t, mockmodel.Config{})
	c := e.start(t, func(cfg *appserver.Config) {
		cfg.OptOutNotifications = []string{protocol.NotifyAgentMessageDelta}
		cfg.ConfigOverrides = []string{`model_reasoning_effort="low"`}
	})
	ctx := ctxTimeout(t, 2*time.Minute)
	thread, err := c.StartThread(ctx, e.threadOpts("never"))
	if err != nil {
		t.Fatal(err)
	}
	res := mustTurn(t, c, ctx, thread, "no deltas please")
	if replyOf(res) != "reply #1: no deltas please" {
		t.Errorf("reply %q", replyOf(res))
	}
	if slices.Contains(methods(res.Notifications), protocol.NotifyAgentMessageDelta) {
		t.Errorf("opted-out deltas delivered: %v", methods(res.Notifications))
	}
}

func TestRealResumeInNewProcessKeepsHistory(t *testing.T) {
	noLeaks(t)
	e := newRealEnv(t, mockmodel.Config{})
	ctx := ctxTimeout(t, 2*time.Minute)

	first := e.start(t, nil)
	thread, err := first.StartThread(ctx, e.threadOpts("never"))
	if err != nil {
		t.Fatal(err)
	}
	if r := mustTurn(t, first, ctx, thread, "remember me"); replyOf(r) != "reply #1: remember me" {
		t.Fatalf("first turn reply %q", replyOf(r))
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	second := e.start(t, nil)
	if second.PID() == first.PID() {
		t.Fatal("same pid")
	}
	if err := second.ResumeThread(ctx, thread, e.threadOpts("never")); err != nil {
		t.Fatal(err)
	}
	r := mustTurn(t, second, ctx, thread, "still there?")
	if replyOf(r) != "reply #2: still there?" {
		t.Errorf("reply after resume %q: history lost", replyOf(r))
	}
}

func TestRealResumeThreadCreatedByCodexExec(t *testing.T) {
	noLeaks(t)
	e := newRealEnv(t, mockmodel.Config{})
	ctx := ctxTimeout(t, 2*time.Minute)
	// The design this project replaces: one `codex exec --json` per message.
	ex, err := appservertest.ExecTurn(ctx, e.bin, e.home, e.cwd, "", "hello from exec")
	if err != nil {
		t.Fatalf("codex exec: %v (stderr: %s)", err, ex.Stderr)
	}
	if ex.ThreadID == "" || ex.Reply != "reply #1: hello from exec" {
		t.Fatalf("exec thread %q reply %q", ex.ThreadID, ex.Reply)
	}
	c := e.start(t, nil)
	if err := c.ResumeThread(ctx, ex.ThreadID, e.threadOpts("never")); err != nil {
		t.Fatal(err)
	}
	// The daemon reads the last turn of every thread it resumes; exec's threads have one too.
	last, ok, err := c.LastTurn(ctx, ex.ThreadID)
	if err != nil || !ok || last.Status != protocol.TurnCompleted || !slices.Equal(last.UserTexts, []string{"hello from exec"}) {
		t.Errorf("last turn of the exec thread %+v ok %v err %v", last, ok, err)
	}
	r := mustTurn(t, c, ctx, ex.ThreadID, "hello from the daemon")
	if replyOf(r) != "reply #2: hello from the daemon" {
		t.Errorf("reply %q: the exec turn is not in the resumed history", replyOf(r))
	}
}

func TestRealResumeUnknownThread(t *testing.T) {
	noLeaks(t)
	e := newRealEnv(t, mockmodel.Config{})
	c := e.start(t, nil)
	err := c.ResumeThread(ctxTimeout(t, time.Minute), "01a1fd80-0000-7000-8000-000000000000", e.threadOpts("never"))
	if !errors.Is(err, appserver.ErrThreadNotFound) {
		t.Fatalf("resume of an unknown thread: %v, want ErrThreadNotFound", err)
	}
	t.Logf("codex said: %v", err)
	// A turn on a thread this process never loaded is refused the same way.
	_, err = c.RunTurn(ctxTimeout(t, time.Minute), "01a1fd80-0000-7000-8000-000000000000", text("hi"), appserver.TurnOptions{})
	if !errors.Is(err, appserver.ErrThreadNotFound) {
		t.Errorf("turn on an unknown thread: %v, want ErrThreadNotFound", err)
	}
	// The child is still fine.
	if _, err := c.StartThread(ctxTimeout(t, time.Minute), e.threadOpts("never")); err != nil {
		t.Errorf("start thread after the failed resume: %v", err)
	}
}

func TestRealApprovalAnsweredByDefaultPolicy(t *testing.T) {
	noLeaks(t)
	e, c, ctx, thread := startRealThread(t, "untrusted") // zero Policy: decline
	res := mustTurn(t, c, ctx, thread, "SHELL please")
	if res.Status != protocol.TurnCompleted {
		t.Fatalf("status %q error %+v", res.Status, res.Error)
	}
	cmds := items(t, res.Notifications, protocol.ItemCommandExecution)
	if len(cmds) != 1 || cmds[0].Status != "declined" {
		t.Errorf("command items %+v, want one declined", cmds)
	}
	if !slices.Contains(methods(res.Notifications), protocol.NotifyServerRequestClear) {
		t.Errorf("no serverRequest/resolved: the request was not answered? %v", methods(res.Notifications))
	}
	if !strings.HasPrefix(replyOf(res), "tool said: ") || strings.Contains(replyOf(res), "shell-ran") {
		t.Errorf("reply %q, want the model told of the rejection", replyOf(res))
	}
	// The follow-up model request carries the rejected tool output.
	if reqs := e.mock.Requests(); len(reqs) != 2 || !reqs[1].HasToolOutput {
		t.Errorf("model requests %d, want the tool follow-up", len(reqs))
	}
}

// TestRealApprovalCancelInterruptsTurn documents why the default policy answers "decline" even
// though codex 0.169 does not list it in availableDecisions: "cancel", which it does list, ends
// the whole turn without an answer for the user.
func TestRealApprovalCancelInterruptsTurn(t *testing.T) {
	noLeaks(t)
	e := newRealEnv(t, mockmodel.Config{})
	c := e.start(t, func(cfg *appserver.Config) { cfg.Policy = appserver.Policy{Command: protocol.DecisionCancel} })
	ctx := ctxTimeout(t, 2*time.Minute)
	thread, err := c.StartThread(ctx, e.threadOpts("untrusted"))
	if err != nil {
		t.Fatal(err)
	}
	res := mustTurn(t, c, ctx, thread, "SHELL please")
	if res.Status != protocol.TurnInterrupted || replyOf(res) != "" {
		t.Errorf("status %q reply %q, want interrupted without a reply", res.Status, replyOf(res))
	}
}

func TestRealApprovalAcceptedByAcceptPolicy(t *testing.T) {
	noLeaks(t)
	e := newRealEnv(t, mockmodel.Config{})
	c := e.start(t, func(cfg *appserver.Config) { cfg.Policy = appserver.AcceptPolicy() })
	ctx := ctxTimeout(t, 2*time.Minute)
	opts := e.threadOpts("untrusted")
	opts.Sandbox = "danger-full-access" // the container may lack what the sandbox needs
	thread, err := c.StartThread(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	res := mustTurn(t, c, ctx, thread, "SHELL please")
	if res.Status != protocol.TurnCompleted {
		t.Fatalf("status %q error %+v", res.Status, res.Error)
	}
	cmds := items(t, res.Notifications, protocol.ItemCommandExecution)
	if len(cmds) != 1 || cmds[0].Status != "completed" {
		t.Fatalf("command items %+v, want one completed", cmds)
	}
	if !strings.Contains(replyOf(res), "shell-ran") {
		t.Errorf("reply %q, want the command's output", replyOf(res))
	}
}

func TestRealModelErrorFailsTurn(t *testing.T) {
	noLeaks(t)
	_, c, ctx, thread := startRealThread(t, "never")
	res, err := c.RunTurn(ctx, thread, text("FAIL now"), appserver.TurnOptions{})
	if err != nil {
		t.Fatalf("a failed turn is a result, got error %v", err)
	}
	if res.Status != protocol.TurnFailed || res.Error == nil || res.Error.Message == "" {
		t.Fatalf("status %q error %+v, want failed with a message", res.Status, res.Error)
	}
	if !slices.Contains(methods(res.Notifications), protocol.NotifyError) {
		t.Errorf("no error notification in %v", methods(res.Notifications))
	}
	// The child survives a failed turn.
	if r := mustTurn(t, c, ctx, thread, "after the failure"); r.Status != protocol.TurnCompleted {
		t.Errorf("next turn status %q", r.Status)
	}
}

func TestRealHangingModelIsInterruptedAndChildStaysUsable(t *testing.T) {
	noLeaks(t)
	e, c, ctx, thread := startRealThread(t, "never")
	// The deadline passes once the model stream hangs, not after a fixed time that a loaded
	// machine could reach before codex got to the model.
	deadline, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	type outcome struct {
		res *appserver.TurnResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		// A child that ignored the interrupt would end as ErrWedged after this grace, not as
		// an interrupted turn.
		res, err := c.RunTurn(deadline, thread, text("HANG now"), appserver.TurnOptions{InterruptGrace: promptly})
		done <- outcome{res, err}
	}()
	if err := e.mock.WaitHung(ctx, 1); err != nil {
		t.Fatalf("the model stream never hung: %v (stderr: %s)", err, c.StderrTail())
	}
	start := time.Now()
	cancel(errTurnDeadline)
	o := <-done
	res, err := o.res, o.err
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want the deadline (stderr: %s)", err, c.StderrTail())
	}
	if res == nil || res.Status != protocol.TurnInterrupted {
		t.Fatalf("result %+v, want interrupted", res)
	}
	within(t, start, promptly, "interrupting a hung turn")
	if e.mock.Hung() != 1 {
		t.Errorf("mock saw %d hung streams, want 1: the turn did not hang where expected", e.mock.Hung())
	}
	r := mustTurn(t, c, ctx, thread, "hello after hang")
	if r.Status != protocol.TurnCompleted || !strings.HasSuffix(replyOf(r), ": hello after hang") {
		t.Errorf("turn after the interrupt: status %q reply %q", r.Status, replyOf(r))
	}
}

// TestRealRevertDropsTurnOfKilledChild: a turn whose child was SIGKILLed mid-turn stays in the
// thread's history as interrupted, user message included. The next child finds it with LastTurn
// and drops it with RevertThread, so that running the message again reaches the model once.
func TestRealRevertDropsTurnOfKilledChild(t *testing.T) {
	noLeaks(t)
	var hung atomic.Bool
	e := newRealEnv(t, mockmodel.Config{Script: func(req mockmodel.Request) mockmodel.Reply {
		if req.LastUserText == "crash-me" && hung.CompareAndSwap(false, true) {
			return mockmodel.Reply{Hang: true}
		}
		return mockmodel.DefaultScript(req)
	}})
	ctx := ctxTimeout(t, 2*time.Minute)
	first := e.start(t, nil)
	thread, err := first.StartThread(ctx, e.threadOpts("never"))
	if err != nil {
		t.Fatal(err)
	}
	done := mustTurn(t, first, ctx, thread, "before")
	last, ok, err := first.LastTurn(ctx, thread)
	if err != nil || !ok || last.ID != done.TurnID || last.Status != protocol.TurnCompleted || !slices.Equal(last.UserTexts, []string{"before"}) {
		t.Fatalf("last turn %+v ok %v err %v, want the completed turn %s", last, ok, err, done.TurnID)
	}
	killed := make(chan error, 1)
	go func() {
		_, err := first.RunTurn(ctx, thread, text("crash-me"), appserver.TurnOptions{})
		killed <- err
	}()
	if err := e.mock.WaitHung(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(-first.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-killed; !errors.Is(err, appserver.ErrChildExited) {
		t.Fatalf("turn of the killed child: %v, want ErrChildExited", err)
	}

	second := e.start(t, nil)
	if err := second.ResumeThread(ctx, thread, e.threadOpts("never")); err != nil {
		t.Fatal(err)
	}
	last, ok, err = second.LastTurn(ctx, thread)
	if err != nil || !ok || last.ID == done.TurnID || last.Status != protocol.TurnInterrupted || !slices.Equal(last.UserTexts, []string{"crash-me"}) {
		t.Fatalf("last turn after the kill %+v ok %v err %v, want crash-me interrupted", last, ok, err)
	}
	err = second.RevertThread(ctx, thread, "01a1fd80-0000-7000-8000-000000000000")
	var re *jsonrpc2.Error
	if !errors.As(err, &re) || re.Code != protocol.CodeInvalidRequest {
		t.Errorf("revert before an unknown turn: %v, want -32600", err)
	}
	t.Logf("codex said: %v", err)
	if err := second.RevertThread(ctx, thread, last.ID); err != nil {
		t.Fatal(err)
	}
	if last, ok, err = second.LastTurn(ctx, thread); err != nil || !ok || last.ID != done.TurnID {
		t.Errorf("last turn after the revert %+v ok %v err %v, want %s", last, ok, err, done.TurnID)
	}
	if r := mustTurn(t, second, ctx, thread, "crash-me"); replyOf(r) != "reply #2: crash-me" {
		t.Errorf("reply %q, want the message counted once", replyOf(r))
	}
	reqs := e.mock.Requests()
	if got := reqs[len(reqs)-1].UserTexts; !slices.Equal(got, []string{"before", "crash-me"}) {
		t.Errorf("the model got %q, want before, crash-me", got)
	}
}

// TestRealLastTurnOfNewThreadRefused: codex has no history to list before a thread's first user
// message; it answers -32600 rather than an empty page.
func TestRealLastTurnOfNewThreadRefused(t *testing.T) {
	noLeaks(t)
	_, c, ctx, thread := startRealThread(t, "never")
	last, ok, err := c.LastTurn(ctx, thread)
	var re *jsonrpc2.Error
	if !errors.As(err, &re) || re.Code != protocol.CodeInvalidRequest || ok {
		t.Errorf("last turn of a new thread %+v ok %v err %v, want -32600", last, ok, err)
	}
	t.Logf("codex said: %v", err)
}

// account/read tells a codex that needs an OpenAI login it does not have (empty CODEX_HOME) from
// one whose model provider needs none (the mock's config), both with no account.
func TestRealReadAccount(t *testing.T) {
	e := newRealEnv(t, mockmodel.Config{})
	empty := t.TempDir()
	for _, tc := range []struct {
		home     string
		requires bool
	}{{e.home, false}, {empty, true}} {
		c := e.start(t, func(cfg *appserver.Config) { cfg.CodexHome = tc.home })
		res, err := c.ReadAccount(ctxTimeout(t, time.Minute))
		if err != nil {
			t.Fatalf("CODEX_HOME %s: %v", tc.home, err)
		}
		if res.Account != nil || res.RequiresOpenaiAuth != tc.requires {
			t.Errorf("CODEX_HOME %s: account/read = %+v (account %+v), want no account and requiresOpenaiAuth %v",
				tc.home, res, res.Account, tc.requires)
		}
	}
}

// config/read reports the effective model and provider: the mock's config.toml, and a -c
// override on top of it.
func TestRealReadConfig(t *testing.T) {
	e := newRealEnv(t, mockmodel.Config{})
	c := e.start(t, nil)
	res, err := c.ReadConfig(ctxTimeout(t, time.Minute), e.cwd)
	if err != nil {
		t.Fatal(err)
	}
	if m, p := res.Config.Model, res.Config.ModelProvider; m == nil || *m != "mock-model" || p == nil || *p != "mock" {
		t.Errorf("config/read: model %v provider %v, want mock-model and mock", m, p)
	}
	c2 := e.start(t, func(cfg *appserver.Config) { cfg.ConfigOverrides = []string{`model="other-model"`} })
	res, err = c2.ReadConfig(ctxTimeout(t, time.Minute), "")
	if err != nil {
		t.Fatal(err)
	}
	if m := res.Config.Model; m == nil || *m != "other-model" {
		t.Errorf("config/read with -c model=other-model: model %v", m)
	}
}

// Version accepts the codex CLI and refuses anything else with ErrNotCodex, naming the binary.
func TestVersion(t *testing.T) {
	bin := appservertest.CodexBin(t)
	ctx := ctxTimeout(t, time.Minute)
	if v, err := appserver.Version(ctx, bin, nil); err != nil || v == "" || strings.ContainsAny(v, " \n") {
		t.Fatalf("Version(codex) = %q, %v", v, err)
	}
	for _, other := range []string{"/bin/true", "/bin/false", "/bin/echo"} {
		v, err := appserver.Version(ctx, other, nil)
		if !errors.Is(err, appserver.ErrNotCodex) || !strings.Contains(err.Error(), other) {
			t.Errorf("Version(%s) = %q, %v; want ErrNotCodex naming it", other, v, err)
		}
	}
}
