package molecule

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/bridge/molecule/ledger"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/chatfiles"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// attemptAnswerer sends report.txt on its first attempt at a message and then fails it as the
// model service unreachable (the inbox tries the message again); its second attempt sends
// data.csv and answers. It keeps the first attempt's send_file so the test can call it late.
type attemptAnswerer struct {
	mu       sync.Mutex
	attempts int
	first    appserver.ToolHandler
}

func (a *attemptAnswerer) SubmitInput(ctx context.Context, key string, in supervisor.Input) (supervisor.Reply, error) {
	a.mu.Lock()
	a.attempts++
	n := a.attempts
	if n == 1 {
		a.first = in.CallTool
	}
	a.mu.Unlock()
	name := "data.csv"
	if n == 1 {
		name = "report.txt"
	}
	args, _ := json.Marshal(chatfiles.Args{Path: name})
	if res := in.CallTool(ctx, appserver.ToolCall{Tool: chatfiles.ToolName, Arguments: args}); !res.OK {
		return supervisor.Reply{}, &os.PathError{Op: "send_file", Path: name, Err: os.ErrInvalid}
	}
	if n == 1 {
		return supervisor.Reply{ChatKey: key, ThreadID: "th", TurnID: "tu1"}, unreachable(key)
	}
	return supervisor.Reply{ChatKey: key, ThreadID: "th", TurnID: "tu2", Status: "completed", Text: "here it is"}, nil
}

// Each attempt at a message has its own send_file box: the files of an attempt that failed
// (and was tried again) do not ride on the later answer; they are dropped with it, their copies
// leave the outbox, and the failed attempt's notice and the answer name them as not sent. The failed attempt's send_file,
// called after that, is refused and copies nothing.
func TestFailedAttemptsFilesDoNotRide(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	a := &attemptAnswerer{}
	log, _ := newTestLogger(t)
	cfg := testConfig(p, t.TempDir(), a, log)
	cfg.WorkDir = t.TempDir()
	dir := chatfiles.Folder(cfg.WorkDir, "canvas:"+p.WorkspaceID())
	must(t, os.MkdirAll(dir, 0o700))
	must(t, os.WriteFile(filepath.Join(dir, "report.txt"), []byte("total: 42\n"), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "data.csv"), []byte("a,b\n1,2\n"), 0o600))
	r := start(t, cfg)
	p.Enqueue(moleculetest.CanvasMessage("make me a report"))
	var reply moleculetest.Notify
	must(t, p.WaitFor(waitCtx(t), func() bool {
		for _, n := range p.Notifies() {
			if strings.HasPrefix(n.Message, "here it is") {
				reply = n
				return true
			}
		}
		return false
	}))
	var names []string
	for _, f := range reply.Attachments {
		names = append(names, f.Name)
	}
	if strings.Join(names, " ") != "data.csv" {
		t.Errorf("attachments %q, want data.csv alone: report.txt was sent by the attempt that failed", names)
	}
	if want := "[report.txt not sent: " + whyAttemptFailed + "]"; !strings.Contains(reply.Message, want) {
		t.Errorf("reply %q\nwant it to name the failed attempt's file: %q", reply.Message, want)
	}
	// The failed attempt's note (the chat is told the model service is away) names them too.
	var noted bool
	for _, n := range p.Notifies() {
		noted = noted || (!strings.HasPrefix(n.Message, "here it is") && strings.Contains(n.Message, "[report.txt not sent: "+whyAttemptFailed+"]"))
	}
	if !noted {
		t.Errorf("notices %+v; want the failed attempt's to name report.txt as not sent", p.Notifies())
	}
	a.mu.Lock()
	late := a.first
	a.mu.Unlock()
	args, _ := json.Marshal(chatfiles.Args{Path: "report.txt"})
	if res := late(context.Background(), appserver.ToolCall{Tool: chatfiles.ToolName, Arguments: args}); res.OK ||
		!strings.Contains(res.Text, whyLate) {
		t.Errorf("the failed attempt's send_file called late = %+v; want it refused: %q", res, whyLate)
	}
	must(t, r.stop())
	if left := outboxFiles(t, cfg.StateDir); len(left) != 0 {
		t.Errorf("copies left in the outbox: %v", left)
	}
}

// A send_file call that completes after its turn's reply was taken is refused with a tool error
// that says so, and copies nothing: the reply that was taken is the one that goes.
func TestLateSendFileRefused(t *testing.T) {
	t.Parallel()
	c := newFileChat(t, routeNotify)
	c.write(t, "report.txt", 10)
	c.write(t, "late.txt", 10)
	tool := c.m.replies.sendFileTool(c.msg)
	call := func(path string) appserver.ToolResult {
		args, _ := json.Marshal(chatfiles.Args{Path: path})
		return tool(context.Background(), appserver.ToolCall{Tool: chatfiles.ToolName, Arguments: args})
	}
	if res := call("report.txt"); !res.OK {
		t.Fatalf("send_file(report.txt) = %+v; want it taken", res)
	}
	_, files := withFiles(c.m.replies.takeBox(c.msg.ActivityID), "done")
	if len(files) != 1 {
		t.Fatalf("the reply took %d files, want 1", len(files))
	}
	res := call("late.txt")
	if res.OK || !strings.HasPrefix(res.Text, "late.txt not sent: ") || !strings.Contains(res.Text, whyLate) {
		t.Errorf("late send_file = %+v; want it refused: %q", res, whyLate)
	}
	left := outboxFiles(t, c.stateDir)
	if len(left) != 1 || left[0] != files[0].Path {
		t.Errorf("outbox holds %v; want only the taken file %s", left, files[0].Path)
	}
}

// At start the outbox keeps only the copies a pending reply lists: a late send_file's copy from
// an older version, a crashed turn's copies, anything else there, is swept.
func TestOutboxSweptAtStart(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	stateDir := t.TempDir()
	outbox := filepath.Join(stateDir, outboxDirName)
	keep := filepath.Join(outbox, outboxName("act-kept"), "1-report.txt")
	stray := []string{
		filepath.Join(outbox, outboxName("act-kept"), "2-late.txt"),
		filepath.Join(outbox, outboxName("act-gone"), "1-old.txt"),
		filepath.Join(outbox, outboxName("act-gone"), "attempt-9", "1-x.txt"),
		filepath.Join(outbox, "loose.bin"),
	}
	for _, f := range append([]string{keep}, stray...) {
		must(t, os.MkdirAll(filepath.Dir(f), 0o700))
		must(t, os.WriteFile(f, []byte("x"), 0o600))
	}
	// The stored pending reply that lists keep, as an earlier run left it; the platform refuses
	// its delivery for now, so the copy must still be there once the sweep has run.
	l, err := ledger.Open(ledger.Config{Dir: stateDir, WorkspaceID: p.WorkspaceID(), RecentIDs: 100})
	must(t, err)
	l.SetPending(ledger.Reply{ActivityID: "act-kept", ChatKey: "canvas:" + p.WorkspaceID(), Text: "done",
		Route: ledger.Route{Kind: routeNotify, Workspace: p.WorkspaceID()},
		Files: []ledger.SentFile{{Name: "report.txt", MimeType: "text/plain", Size: 1, Path: keep}}})
	must(t, l.Sync())
	p.FailNext(moleculetest.RouteChatUpload, 1000, 502)
	log, _ := newTestLogger(t)
	r := start(t, testConfig(p, stateDir, &attemptAnswerer{}, log))
	must(t, p.WaitFor(waitCtx(t), func() bool { return p.CountCalls(moleculetest.RouteChatUpload, 502) > 0 }))
	if left := outboxFiles(t, stateDir); len(left) != 1 || left[0] != keep {
		t.Errorf("outbox holds %v after start; want only the pending reply's %s", left, keep)
	}
	if _, err := os.Stat(filepath.Join(outbox, outboxName("act-gone"))); !os.IsNotExist(err) {
		t.Errorf("the folder of a reply no longer pending is still there (%v)", err)
	}
	p.ClearFailures()
	must(t, p.WaitFor(waitCtx(t), func() bool { return len(p.Notifies()) == 1 }))
	must(t, r.stop())
}

// outboxFiles lists every file under the outbox (not folders).
func outboxFiles(t *testing.T, stateDir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(filepath.Join(stateDir, outboxDirName), func(path string, d os.DirEntry, err error) error {
		if os.IsNotExist(err) {
			return filepath.SkipDir
		}
		if err != nil {
			return err
		}
		if !d.IsDir() {
			files = append(files, path)
		}
		return nil
	})
	must(t, err)
	return files
}
