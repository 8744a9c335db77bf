package appserver_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/appserver/appservertest"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// TestAskApprover: with AskPolicy the turn's Approve decides a command approval, and what it
// sees names the command, the request and the decisions offered.
func TestAskApprover(t *testing.T) {
	for _, tc := range []struct {
		name     string
		decision string
		err      error
		want     string
		status   string
	}{
		{"approve", protocol.DecisionAccept, nil, "decision: accept", "completed"},
		// The fake offers accept but not acceptForSession: narrowed, never widened.
		{"approve for the session, narrowed to what is offered", protocol.DecisionAcceptForSession, nil, "decision: accept", "completed"},
		{"deny", protocol.DecisionDecline, nil, "decision: decline", "declined"},
		{"no answer declines", "", errors.New("nobody answered"), "decision: decline", "declined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			noLeaks(t)
			c := startFake(t, appservertest.FakeApproval, func(cfg *appserver.Config) { cfg.Policy = appserver.AskPolicy() })
			ctx := ctxTimeout(t, time.Minute)
			thread, err := c.StartThread(ctx, appserver.ThreadOptions{ApprovalPolicy: "untrusted"})
			if err != nil {
				t.Fatal(err)
			}
			var asked []appserver.ApprovalRequest
			res, err := c.RunTurn(ctx, thread, text("run something"), appserver.TurnOptions{
				Approve: func(_ context.Context, req appserver.ApprovalRequest) (string, error) {
					asked = append(asked, req)
					return tc.decision, tc.err
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != protocol.TurnCompleted || replyOf(res) != tc.want {
				t.Errorf("status %q reply %q, want %q", res.Status, replyOf(res), tc.want)
			}
			if len(asked) != 1 {
				t.Fatalf("Approve called %d times, want 1", len(asked))
			}
			a := asked[0]
			if a.Kind != appserver.ApprovalCommand || a.Command != "/bin/bash -lc 'echo shell-ran'" || a.Cwd != "/" ||
				a.ThreadID != thread || a.TurnID != res.TurnID || a.RequestID != "0" || a.ItemID == "" ||
				strings.Join(a.Offered, ",") != "accept,cancel" {
				t.Errorf("request %+v", a)
			}
			if cmds := items(t, res.Notifications, protocol.ItemCommandExecution); len(cmds) != 1 || cmds[0].Status != tc.status {
				t.Errorf("command items %+v, want one %s", cmds, tc.status)
			}
		})
	}
}

// TestAskWithoutApproverDeclines: a turn without Approve under AskPolicy is declined at once,
// never left hanging.
func TestAskWithoutApproverDeclines(t *testing.T) {
	noLeaks(t)
	c := startFake(t, appservertest.FakeApproval, func(cfg *appserver.Config) { cfg.Policy = appserver.AskPolicy() })
	ctx := ctxTimeout(t, time.Minute)
	thread, err := c.StartThread(ctx, appserver.ThreadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.RunTurn(ctx, thread, text("run something"), appserver.TurnOptions{})
	if err != nil || replyOf(res) != "decision: decline" {
		t.Fatalf("reply %q err %v, want decision: decline", replyOf(res), err)
	}
}

// TestAskEndsWithTurn: an Approve still waiting when the turn's context ends sees its context
// end with the turn's cause, the command is not run, and nothing waits for a person.
func TestAskEndsWithTurn(t *testing.T) {
	noLeaks(t)
	c := startFake(t, appservertest.FakeApproval, func(cfg *appserver.Config) { cfg.Policy = appserver.AskPolicy() })
	ctx := ctxTimeout(t, time.Minute)
	thread, err := c.StartThread(ctx, appserver.ThreadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tctx, stop := context.WithCancelCause(ctx)
	stopped := errors.New("stopped by the test")
	approverDone := make(chan error, 1)
	res, err := c.RunTurn(tctx, thread, text("run something"), appserver.TurnOptions{
		InterruptGrace: 10 * time.Second,
		Approve: func(actx context.Context, _ appserver.ApprovalRequest) (string, error) {
			stop(stopped) // the person never answers; the chat stops the turn instead
			<-actx.Done()
			approverDone <- context.Cause(actx)
			return "", context.Cause(actx)
		},
	})
	// The decline and the interrupt race: either the turn went on with the command declined
	// and completed before the interrupt, or it was interrupted.
	switch {
	case err == nil && res.Status == protocol.TurnCompleted:
		if replyOf(res) != "decision: decline" {
			t.Errorf("completed with %q, want the command declined", replyOf(res))
		}
	case errors.Is(err, stopped) && res != nil && res.Status == protocol.TurnInterrupted:
	default:
		t.Fatalf("RunTurn: %v; want interrupted with the stop's cause, or completed with the command declined", err)
	}
	if cause := <-approverDone; !errors.Is(cause, stopped) {
		t.Errorf("Approve's context ended with %v, want the turn's cause", cause)
	}
}

// TestAskFileChange: a file change approval shows the files of its item/started, and the
// dispatcher keeps delivering notifications while a person decides.
func TestAskFileChange(t *testing.T) {
	noLeaks(t)
	dir := t.TempDir()
	scriptPath, record := filepath.Join(dir, "script"), filepath.Join(dir, "received.jsonl")
	script := []string{
		`{"method":"item/started","params":{"threadId":"{thread}","turnId":"{turn}","item":{"type":"fileChange","id":"fc1","status":"inProgress","changes":[{"path":"/w/a.txt","kind":{"type":"add"},"diff":"+hello\n"}]}}}`,
		`{"id":"fc-req","method":"item/fileChange/requestApproval","params":{"threadId":"{thread}","turnId":"{turn}","itemId":"fc1","reason":"write the greeting"}}`,
		`{"method":"thread/status/changed","params":{"threadId":"{thread}","status":{"type":"active","activeFlags":["waitingOnApproval"]}}}`,
		await + `"fc-req"`,
		complete,
	}
	if err := os.WriteFile(scriptPath, []byte(strings.Join(script, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := startFake(t, appservertest.FakeScript, func(cfg *appserver.Config) {
		cfg.Env = append(cfg.Env, appservertest.FakeScriptEnv+"="+scriptPath, appservertest.FakeRecordEnv+"="+record)
		cfg.Policy = appserver.AskPolicy()
	})
	ctx := ctxTimeout(t, time.Minute)
	thread, err := c.StartThread(ctx, appserver.ThreadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan struct{})
	var asked appserver.ApprovalRequest
	res, err := c.RunTurn(ctx, thread, text("hi"), appserver.TurnOptions{
		OnNotification: func(n protocol.Notification) {
			if n.Method == protocol.NotifyThreadStatus && strings.Contains(string(n.Params), "waitingOnApproval") {
				close(waiting)
			}
		},
		Approve: func(actx context.Context, req appserver.ApprovalRequest) (string, error) {
			asked = req
			// The status line comes after the request: it arrives only if the dispatcher
			// does not wait for this answer.
			select {
			case <-waiting:
			case <-actx.Done():
				return "", context.Cause(actx)
			}
			return protocol.DecisionAcceptForSession, nil
		},
	})
	if err != nil || res.Status != protocol.TurnCompleted {
		t.Fatalf("RunTurn: %v", err)
	}
	if asked.Kind != appserver.ApprovalFileChange || asked.Reason != "write the greeting" || asked.RequestID != `"fc-req"` ||
		len(asked.Changes) != 1 || asked.Changes[0].Path != "/w/a.txt" || asked.Changes[0].Diff != "+hello\n" {
		t.Errorf("request %+v", asked)
	}
	r := &hostileRun{record: record}
	got := r.answers(t)[`"fc-req"`]
	if len(got) != 1 || string(got[0]["result"]) != `{"decision":"acceptForSession"}` {
		t.Errorf("answers to fc-req: %v", got)
	}
}
