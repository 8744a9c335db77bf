package local

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest/observer"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/internal/chatfiles"
)

// fileChat is one message of chat "demo" on a local inbox whose working directory is its own:
// what its send_file calls are answered with, and the files and refusals its reply gets.
type fileChat struct {
	h       *Inbox
	workDir string
	// dir is the chat's folder.
	dir  string
	box  *fileBox
	tool appserver.ToolHandler
	logs *observer.ObservedLogs
}

// newFileChat makes the chat's folder under a new working directory; budget is the inbox's
// MaxFileBytes (0: the default).
func newFileChat(t *testing.T, budget int64) *fileChat {
	t.Helper()
	log, logs := newTestLogger(t)
	workDir := t.TempDir()
	h, err := New(Config{Answerer: chattest.NewAnswerer(nil), Logger: log, WorkDir: workDir, MaxFileBytes: budget})
	must(t, err)
	c := &fileChat{h: h, workDir: workDir, dir: chatfiles.Folder(workDir, "demo"), box: &fileBox{}, logs: logs}
	must(t, os.MkdirAll(c.dir, 0o700))
	c.tool = h.sendFileTool("demo", c.box, log)
	return c
}

// send calls send_file for path as codex does.
func (c *fileChat) send(t *testing.T, path string) appserver.ToolResult {
	t.Helper()
	args, err := json.Marshal(chatfiles.Args{Path: path})
	must(t, err)
	return c.tool(context.Background(), appserver.ToolCall{Tool: chatfiles.ToolName, Arguments: args})
}

// write makes a file of n bytes in the chat's folder.
func (c *fileChat) write(t *testing.T, name string, n int) {
	t.Helper()
	must(t, os.WriteFile(filepath.Join(c.dir, name), []byte(strings.Repeat("x", n)), 0o600))
}

// The tool's answer and the reply's note name a refused file as the agent wrote it: a path named
// from the working directory is not shown made absolute. The daemon's log has the full path.
func TestSendFileNamesNoHostPath(t *testing.T) {
	t.Parallel()
	c := newFileChat(t, 0)
	path := filepath.Join(chatfiles.ChatsDirName, filepath.Base(c.dir), "missing.txt")
	res := c.send(t, path)
	if res.OK || !strings.HasPrefix(res.Text, path+" not sent: ") || strings.Contains(res.Text, c.workDir) {
		t.Errorf("send_file(%q) = %+v; want it refused, named as written and with no host path", path, res)
	}
	if text, _ := c.box.take("done"); strings.Contains(text, c.workDir) || !strings.Contains(text, "["+path+" not sent: ") {
		t.Errorf("reply %q; want the refusal named as written, with no host path", text)
	}
	logged := c.logs.FilterMessage("file not sent").All()
	if len(logged) != 1 {
		t.Fatalf("logged %+v; want one refusal", logged)
	}
	if cause, _ := logged[0].ContextMap()["cause"].(string); !strings.Contains(cause, filepath.Join(c.dir, "missing.txt")) {
		t.Errorf("logged %+v; want the cause with the full path", logged[0].ContextMap())
	}
}

// Config.MaxFileBytes is a budget for all the files of one reply: a file over it, or over what
// the reply's earlier files left of it, is refused saying which.
func TestSendFileOverTheReplyBudget(t *testing.T) {
	t.Parallel()
	c := newFileChat(t, 1000)
	c.write(t, "a.bin", 600)
	c.write(t, "b.bin", 500)
	c.write(t, "c.bin", 1001)
	if res := c.send(t, "c.bin"); res.OK || res.Text != "c.bin not sent: it is 1001 bytes, over this reply's budget of 1000 bytes for files" {
		t.Errorf("send_file(c.bin) = %+v; want it refused as over the reply's budget", res)
	}
	if res := c.send(t, "a.bin"); !res.OK {
		t.Fatalf("send_file(a.bin) = %+v; want it taken", res)
	}
	if res := c.send(t, "b.bin"); res.OK || res.Text != "b.bin not sent: it is 500 bytes, over the 400 bytes left of this reply's budget of 1000 bytes for files" {
		t.Errorf("send_file(b.bin) = %+v; want it refused as over what is left of the reply's budget", res)
	}
	if _, files := c.box.take(""); len(files) != 1 || files[0].Name != "a.bin" {
		t.Errorf("files %+v; want a.bin alone", files)
	}
}
