package appserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/appserver/appservertest"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// Several chats' threads in one child (issue 39): turns, interrupts, approvals, tool calls and
// token pushes are per thread.

type turnOutcome struct {
	res *appserver.TurnResult
	err error
}

// startHanging runs a "hang" turn (FakeMarked) on thread in the background and returns once
// codex has started it; cancel interrupts it, and the outcome arrives on the channel.
func startHanging(t *testing.T, c *appserver.Client, ctx context.Context, thread string, grace time.Duration) (cancel context.CancelCauseFunc, out <-chan turnOutcome) {
	t.Helper()
	hctx, cancel := context.WithCancelCause(ctx)
	started := make(chan struct{})
	var once sync.Once
	done := make(chan turnOutcome, 1)
	go func() {
		res, err := c.RunTurn(hctx, thread, text("hang on"), appserver.TurnOptions{
			InterruptGrace: grace,
			OnNotification: func(n protocol.Notification) {
				if n.Method == protocol.NotifyTurnStarted {
					once.Do(func() { close(started) })
				}
			},
		})
		done <- turnOutcome{res, err}
	}()
	select {
	case <-started:
	case o := <-done:
		cancel(nil)
		t.Fatalf("the hanging turn ended before it started: %+v %v", o.res, o.err)
	}
	t.Cleanup(func() { cancel(nil) })
	return cancel, done
}

func startThreads(t *testing.T, c *appserver.Client, ctx context.Context, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		id, err := c.StartThread(ctx, appserver.ThreadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	return ids
}

func TestFakeHungTurnHoldsNoOtherThread(t *testing.T) {
	noLeaks(t)
	c := startFake(t, appservertest.FakeMarked, nil)
	ctx := ctxTimeout(t, time.Minute)
	th := startThreads(t, c, ctx, 2)
	stop, hung := startHanging(t, c, ctx, th[0], 10*time.Second)

	res, err := c.RunTurn(ctx, th[1], text("hi"), appserver.TurnOptions{})
	if err != nil {
		t.Fatalf("a turn of another thread beside a hung one: %v", err)
	}
	if res.Status != protocol.TurnCompleted || replyOf(res) != "reply #1: hi" || res.ThreadID != th[1] {
		t.Errorf("status %q reply %q thread %s, want the other thread's turn completed", res.Status, replyOf(res), res.ThreadID)
	}
	// A second turn on the hung thread is still refused: codex would merge it.
	if _, err := c.RunTurn(ctx, th[0], text("more"), appserver.TurnOptions{}); !errors.Is(err, appserver.ErrTurnInProgress) {
		t.Errorf("second turn on the hung thread: %v, want ErrTurnInProgress", err)
	}
	stop(errStopAsked)
	o := <-hung
	if !errors.Is(o.err, errStopAsked) || o.res == nil || o.res.Status != protocol.TurnInterrupted {
		t.Errorf("the hung turn after the stop: %+v %v, want interrupted", o.res, o.err)
	}
	if c.Wedged() || c.Running() {
		t.Errorf("wedged %v running %v after the interrupted turn", c.Wedged(), c.Running())
	}
	// Both threads go on.
	for _, id := range th {
		if res, err := c.RunTurn(ctx, id, text("after"), appserver.TurnOptions{}); err != nil || res.Status != protocol.TurnCompleted {
			t.Errorf("thread %s after the stop: %+v %v", id, res, err)
		}
	}
}

var errStopAsked = errors.New("stop asked")

func TestFakeWedgedThreadLeavesTheOthers(t *testing.T) {
	noLeaks(t)
	c := startFake(t, appservertest.FakeMarked, nil)
	ctx := ctxTimeout(t, time.Minute)
	th := startThreads(t, c, ctx, 2)
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	_, err := c.RunTurn(wctx, th[0], text("wedge"), appserver.TurnOptions{
		InterruptGrace: 300 * time.Millisecond,
		OnNotification: func(n protocol.Notification) {
			if n.Method == protocol.NotifyTurnStarted {
				cancel(errTurnDeadline)
			}
		},
	})
	if !errors.Is(err, appserver.ErrWedged) {
		t.Fatalf("turn that ignored the interrupt: %v, want ErrWedged", err)
	}
	if !c.Wedged() {
		t.Error("Wedged false after a thread's turn ignored turn/interrupt")
	}
	if _, err := c.RunTurn(ctx, th[0], text("again"), appserver.TurnOptions{}); !errors.Is(err, appserver.ErrWedged) {
		t.Errorf("turn on the wedged thread: %v, want ErrWedged", err)
	}
	res, err := c.RunTurn(ctx, th[1], text("hi"), appserver.TurnOptions{})
	if err != nil || res.Status != protocol.TurnCompleted || replyOf(res) != "reply #1: hi" {
		t.Errorf("turn of the other thread: %+v %v, want it answered", res, err)
	}
}

func TestFakeApprovalsRouteByThread(t *testing.T) {
	noLeaks(t)
	c := startFake(t, appservertest.FakeApproval+",approval-offer=accept+decline", func(cfg *appserver.Config) {
		cfg.Policy = appserver.AskPolicy()
	})
	ctx := ctxTimeout(t, time.Minute)
	th := startThreads(t, c, ctx, 2)
	// Both approvals are asked before either is answered: the turns run side by side.
	var asked sync.WaitGroup
	asked.Add(len(th))
	want := map[string]string{th[0]: protocol.DecisionAccept, th[1]: protocol.DecisionDecline}
	outs := make([]chan turnOutcome, len(th))
	for i, id := range th {
		outs[i] = make(chan turnOutcome, 1)
		go func() {
			res, err := c.RunTurn(ctx, id, text("run it"), appserver.TurnOptions{
				Approve: func(ctx context.Context, r appserver.ApprovalRequest) (string, error) {
					asked.Done()
					asked.Wait()
					if r.ThreadID != id {
						return protocol.DecisionCancel, errors.New("approval of thread " + r.ThreadID + " asked of " + id)
					}
					return want[id], nil
				},
			})
			outs[i] <- turnOutcome{res, err}
		}()
	}
	for i, id := range th {
		o := <-outs[i]
		if o.err != nil || replyOf(o.res) != "decision: "+want[id] {
			t.Errorf("thread %d: %+v %v, want its own decision %q", i, o.res, o.err, want[id])
		}
	}
}

func TestFakeToolCallsRouteByThread(t *testing.T) {
	noLeaks(t)
	script := filepath.Join(t.TempDir(), "script")
	record := filepath.Join(t.TempDir(), "record")
	lines := `{"id":"tool-{thread}","method":"item/tool/call","params":{"threadId":"{thread}","turnId":"{turn}","callId":"c-{thread}","namespace":null,"tool":"send_file","arguments":{"path":"x"}}}
#fake:await "tool-{thread}"
#fake:complete
`
	if err := os.WriteFile(script, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	c := startFake(t, appservertest.FakeScript, func(cfg *appserver.Config) {
		cfg.Env = append(cfg.Env, appservertest.FakeScriptEnv+"="+script, appservertest.FakeRecordEnv+"="+record)
		cfg.DynamicTools = []protocol.DynamicToolSpec{{Type: "function", Name: "send_file", Description: "d", InputSchema: json.RawMessage(`{"type":"object"}`)}}
	})
	ctx := ctxTimeout(t, time.Minute)
	th := startThreads(t, c, ctx, 2)
	var called sync.WaitGroup
	called.Add(len(th))
	outs := make([]chan turnOutcome, len(th))
	for i, id := range th {
		outs[i] = make(chan turnOutcome, 1)
		go func() {
			res, err := c.RunTurn(ctx, id, text("send"), appserver.TurnOptions{
				CallTool: func(ctx context.Context, call appserver.ToolCall) appserver.ToolResult {
					called.Done()
					called.Wait()
					return appserver.ToolResult{Text: "answered by the handler of " + id + " for " + call.ThreadID, OK: call.ThreadID == id}
				},
			})
			outs[i] <- turnOutcome{res, err}
		}()
	}
	for i := range th {
		if o := <-outs[i]; o.err != nil || o.res.Status != protocol.TurnCompleted {
			t.Fatalf("thread %d: %+v %v", i, o.res, o.err)
		}
	}
	rec, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range th {
		var answer string
		for _, l := range strings.Split(string(rec), "\n") {
			if strings.Contains(l, `"id":"tool-`+id+`"`) && strings.Contains(l, "contentItems") {
				answer = l
			}
		}
		if want := "answered by the handler of " + id + " for " + id; !strings.Contains(answer, want) || !strings.Contains(answer, `"success":true`) {
			t.Errorf("answer to thread %s's call: %s, want %q and success", id, answer, want)
		}
	}
}

// pushedTokens is a TokenSource whose token the test changes.
type pushedTokens struct {
	mu      sync.Mutex
	current string
	kick    func()
}

func (s *pushedTokens) Login() protocol.ChatGPTAuthTokens {
	s.mu.Lock()
	defer s.mu.Unlock()
	return protocol.ChatGPTAuthTokens{Type: protocol.LoginTypeChatGPTAuthTokens, AccessToken: s.current, ChatGPTAccountID: "acct"}
}

func (s *pushedTokens) Refresh(context.Context, string) (protocol.ChatGPTAuthTokens, error) {
	return s.Login(), nil
}

func (s *pushedTokens) Subscribe(kick func()) func() {
	s.mu.Lock()
	s.kick = kick
	s.mu.Unlock()
	return func() {}
}

func (s *pushedTokens) set(tok string) {
	s.mu.Lock()
	s.current = tok
	kick := s.kick
	s.mu.Unlock()
	kick()
}

// loggedOnce returns a hook that closes the channel when a line with message msg is logged.
func loggedOnce(msg string) (zap.Option, <-chan struct{}) {
	ch := make(chan struct{})
	var once sync.Once
	return zap.Hooks(func(e zapcore.Entry) error {
		if e.Message == msg {
			once.Do(func() { close(ch) })
		}
		return nil
	}), ch
}

// sentBefore reports whether the record has a line containing a before one containing b.
func sentBefore(t *testing.T, record, a, b string) bool {
	t.Helper()
	rec, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	ia, ib := strings.Index(string(rec), a), strings.Index(string(rec), b)
	return ia >= 0 && (ib < 0 || ia < ib)
}

func TestFakeTokenPushWaitsForTheTurns(t *testing.T) {
	noLeaks(t)
	record := filepath.Join(t.TempDir(), "record")
	tokens := &pushedTokens{current: "token-a"}
	hook, pushed := loggedOnce("new ChatGPT token handed to codex")
	c := startFake(t, appservertest.FakeMarked, func(cfg *appserver.Config) {
		cfg.Env = append(cfg.Env, appservertest.FakeRecordEnv+"="+record)
		cfg.Tokens = tokens
		cfg.Logger = cfg.Logger.WithOptions(hook)
	})
	ctx := ctxTimeout(t, time.Minute)
	th := startThreads(t, c, ctx, 1)
	stop, hung := startHanging(t, c, ctx, th[0], 10*time.Second)
	tokens.set("token-b")
	stop(errStopAsked)
	<-hung
	<-pushed
	if !sentBefore(t, record, `"turn/interrupt"`, `"token-b"`) {
		t.Error("the new token went to codex while the turn ran; without TokenPushWait it waits for the turn's end")
	}
}

func TestFakeTokenPushGoesBesideTurnsPastTheWait(t *testing.T) {
	noLeaks(t)
	record := filepath.Join(t.TempDir(), "record")
	tokens := &pushedTokens{current: "token-a"}
	hook, pushed := loggedOnce("new ChatGPT token handed to codex")
	c := startFake(t, appservertest.FakeMarked, func(cfg *appserver.Config) {
		cfg.Env = append(cfg.Env, appservertest.FakeRecordEnv+"="+record)
		cfg.Tokens = tokens
		cfg.TokenPushWait = 50 * time.Millisecond
		cfg.Logger = cfg.Logger.WithOptions(hook)
	})
	ctx := ctxTimeout(t, time.Minute)
	th := startThreads(t, c, ctx, 2)
	stop, hung := startHanging(t, c, ctx, th[0], 10*time.Second)
	tokens.set("token-b")
	<-pushed // the hung turn still runs: only the push's bound can have let it go
	if !sentBefore(t, record, `"token-b"`, `"turn/interrupt"`) {
		t.Error("the push did not go out beside the running turn")
	}
	// Another thread's turn runs with the new token, beside the hung one.
	if res, err := c.RunTurn(ctx, th[1], text("hi"), appserver.TurnOptions{}); err != nil || res.Status != protocol.TurnCompleted {
		t.Errorf("turn beside the hung one after the push: %+v %v", res, err)
	}
	stop(errStopAsked)
	if o := <-hung; o.res == nil || o.res.Status != protocol.TurnInterrupted {
		t.Errorf("hung turn: %+v %v", o.res, o.err)
	}
}

func TestFakeUnloadThread(t *testing.T) {
	noLeaks(t)
	c := startFake(t, appservertest.FakeMarked, nil)
	ctx := ctxTimeout(t, time.Minute)
	th := startThreads(t, c, ctx, 2)
	stop, hung := startHanging(t, c, ctx, th[0], 10*time.Second)
	if err := c.UnloadThread(ctx, th[0]); !errors.Is(err, appserver.ErrTurnInProgress) {
		t.Errorf("unload of a thread whose turn runs: %v, want ErrTurnInProgress", err)
	}
	if err := c.UnloadThread(ctx, th[1]); err != nil {
		t.Fatalf("unload of an idle thread beside a running turn: %v", err)
	}
	if _, err := c.RunTurn(ctx, th[1], text("hi"), appserver.TurnOptions{}); !errors.Is(err, appserver.ErrThreadNotFound) {
		t.Errorf("turn on the unloaded thread: %v, want ErrThreadNotFound", err)
	}
	stop(errStopAsked)
	<-hung
	if err := c.UnloadThread(ctx, th[0]); err != nil {
		t.Errorf("unload once the turn ended: %v", err)
	}
	if err := c.UnloadThread(ctx, th[0]); err != nil {
		t.Errorf("unload of a thread not loaded any more: %v", err)
	}
}
