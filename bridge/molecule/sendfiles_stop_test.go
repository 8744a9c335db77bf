package molecule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/chatfiles"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// fileAnswerer runs a turn that sends the files its message names ("SEND a.txt b.csv") with
// send_file, as codex's agent would, then ends the turn as end says.
type fileAnswerer struct {
	end func(key string) (supervisor.Reply, error)

	mu      sync.Mutex
	answers []appserver.ToolResult // what send_file told the model, in order
}

func (a *fileAnswerer) SubmitInput(ctx context.Context, key string, in supervisor.Input) (supervisor.Reply, error) {
	if rest, ok := strings.CutPrefix(in.Text, "SEND "); ok {
		for _, p := range strings.Fields(rest) {
			args, _ := json.Marshal(map[string]string{"path": p})
			res := in.CallTool(ctx, appserver.ToolCall{Tool: chatfiles.ToolName, Arguments: args})
			a.mu.Lock()
			a.answers = append(a.answers, res)
			a.mu.Unlock()
		}
	}
	return a.end(key)
}

// accepted counts the send_file calls the model was told will be sent.
func (a *fileAnswerer) accepted() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, r := range a.answers {
		if r.OK {
			n++
		}
	}
	return n
}

// fileEnv is an inbox whose turns send files from the canvas chat's folder, which holds
// report.txt and data.csv (missing.txt is not there: the agent's call of it is refused).
type fileEnv struct {
	p        *moleculetest.Platform
	a        *fileAnswerer
	r        *running
	stateDir string
}

func newFileEnv(t *testing.T, end func(key string) (supervisor.Reply, error)) *fileEnv {
	t.Helper()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	a := &fileAnswerer{end: end}
	log, _ := newTestLogger(t)
	cfg := testConfig(p, t.TempDir(), a, log)
	cfg.WorkDir = t.TempDir()
	dir := chatfiles.Folder(cfg.WorkDir, "canvas:"+p.WorkspaceID())
	must(t, os.MkdirAll(dir, 0o700))
	must(t, os.WriteFile(filepath.Join(dir, "report.txt"), []byte("total: 42\n"), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "data.csv"), []byte("a,b\n1,2\n"), 0o600))
	return &fileEnv{p: p, a: a, r: start(t, cfg), stateDir: cfg.StateDir}
}

// outbox lists the copies waiting in the outbox.
func (e *fileEnv) outbox(t *testing.T) []string {
	t.Helper()
	left, err := filepath.Glob(filepath.Join(e.stateDir, outboxDirName, "*", "*"))
	must(t, err)
	return left
}

// A turn the chat stopped with /stop sends none of its files: the stopped reply names them as
// not sent, still says why the refused one did not go, and their copies leave the outbox
// before the reply is even delivered.
func TestStoppedTurnSendsNoFiles(t *testing.T) {
	t.Parallel()
	e := newFileEnv(t, func(key string) (supervisor.Reply, error) {
		return supervisor.Reply{ChatKey: key, ThreadID: "th", TurnID: "tu", Text: "half a report"},
			errors.Join(errors.New("chat "+key), supervisor.ErrStopped)
	})
	// The reply waits at the platform, so what is on disk is seen before its delivery.
	e.p.FailNext(moleculetest.RouteNotify, 1000, http.StatusBadGateway)
	e.p.Enqueue(moleculetest.CanvasMessage("SEND report.txt missing.txt data.csv"))
	must(t, e.p.WaitFor(waitCtx(t), func() bool { return e.p.CountCalls(moleculetest.RouteNotify, http.StatusBadGateway) > 0 }))
	if n := e.a.accepted(); n != 2 {
		t.Fatalf("the model was told %d files will be sent, want 2", n)
	}
	if left := e.outbox(t); len(left) != 0 {
		t.Errorf("copies of the stopped turn's files still in the outbox: %v", left)
	}
	e.p.ClearFailures()
	must(t, e.p.WaitFor(waitCtx(t), func() bool { return len(e.p.Notifies()) == 1 }))

	n := e.p.Notifies()[0]
	if len(n.Attachments) != 0 || len(e.p.CallsTo(moleculetest.RouteChatUpload)) != 0 {
		t.Errorf("attachments %+v after %d uploads, want none: the turn was stopped", n.Attachments, len(e.p.CallsTo(moleculetest.RouteChatUpload)))
	}
	for _, want := range []string{
		"stopped. What codex had written so far:\n\nhalf a report",
		"[missing.txt not sent: ",
		"[report.txt, data.csv not sent: the turn was stopped]",
	} {
		if !strings.Contains(n.Message, want) {
			t.Errorf("reply %q\nwant it to hold %q", n.Message, want)
		}
	}
	must(t, e.r.stop()) // the delivery ends: the counts are final
	if s := e.r.m.Stats(); s.FilesSent != 0 || s.FilesRefused != 1 {
		t.Errorf("files sent %d refused %d, want 0 and 1 (the stopped ones were not refused)", s.FilesSent, s.FilesRefused)
	}
}

// A turn that failed still sends the files it had taken, with the failure's note and the
// refusals: the agent was told they would go, and what it made may be what the chat needs to
// go on. So does a turn a newer message interrupted (--busy interrupt): nobody asked to drop its
// work.
func TestFailedTurnSendsItsFiles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		end  func(key string) (supervisor.Reply, error)
		note string // in the reply
	}{
		{"turn failed", func(key string) (supervisor.Reply, error) {
			return supervisor.Reply{ChatKey: key, ThreadID: "th", TurnID: "tu", Status: "failed", Error: "model 500"}, nil
		}, "codex failed (status failed): model 500"},
		{"turn deadline", func(key string) (supervisor.Reply, error) {
			return supervisor.Reply{ChatKey: key, ThreadID: "th", TurnID: "tu", Text: "half a report"},
				&supervisor.WatchdogError{ChatKey: key, Watchdog: supervisor.WatchdogTurn, Err: errors.New("deadline")}
		}, "half a report\n\n[codex ran past the time limit"},
		{"child exited", func(key string) (supervisor.Reply, error) {
			return supervisor.Reply{ChatKey: key, ThreadID: "th", TurnID: "tu"}, fmt.Errorf("turn: %w", appserver.ErrChildExited)
		}, "the codex session for this chat ended unexpectedly"},
		{"superseded", func(key string) (supervisor.Reply, error) {
			return supervisor.Reply{ChatKey: key, ThreadID: "th", TurnID: "tu", Text: "half a report"},
				errors.Join(errors.New("chat "+key), supervisor.ErrSuperseded)
		}, "interrupted by a newer message. What codex had written so far:\n\nhalf a report"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newFileEnv(t, tc.end)
			e.p.Enqueue(moleculetest.CanvasMessage("SEND report.txt missing.txt data.csv"))
			must(t, e.p.WaitFor(waitCtx(t), func() bool { return len(e.p.Notifies()) == 1 }))
			n := e.p.Notifies()[0]
			var names []string
			for _, a := range n.Attachments {
				names = append(names, a.Name)
			}
			if strings.Join(names, " ") != "report.txt data.csv" {
				t.Errorf("attachments %q, want report.txt and data.csv", names)
			}
			for _, want := range []string{tc.note, "[missing.txt not sent: "} {
				if !strings.Contains(n.Message, want) {
					t.Errorf("reply %q\nwant it to hold %q", n.Message, want)
				}
			}
			if strings.Contains(n.Message, "report.txt") {
				t.Errorf("reply %q names a file that went", n.Message)
			}
			// A stop lets the delivery end: what it left is final.
			must(t, e.r.stop())
			if s := e.r.m.Stats(); s.FilesSent != 2 {
				t.Errorf("files sent %d, want 2", s.FilesSent)
			}
			if left := e.outbox(t); len(left) != 0 {
				t.Errorf("copies left in the outbox after delivery: %v", left)
			}
		})
	}
}
