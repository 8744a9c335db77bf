package molecule

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest/observer"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/ledger"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/chatfiles"
)

// fileChat is one message, of the canvas user or of a peer, on an inbox (not run) whose working
// and state directories are its own: what its send_file calls are answered with, and the files
// and refusals its reply gets.
type fileChat struct {
	m                 *Inbox
	p                 *moleculetest.Platform
	workDir, stateDir string
	msg               message
	// dir is the chat's folder.
	dir  string
	logs *observer.ObservedLogs
	// tool is the send_file of the message's current attempt (one box), made at the first send.
	tool appserver.ToolHandler
}

// newFileChat is a message routed as kind (routeNotify or routeA2A).
func newFileChat(t *testing.T, kind string) *fileChat {
	t.Helper()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	log, logs := newTestLogger(t)
	c := &fileChat{p: p, workDir: t.TempDir(), stateDir: t.TempDir(), logs: logs}
	cfg := testConfig(p, c.stateDir, chattest.NewAnswerer(nil), log)
	cfg.HTTPClient = &http.Client{Transport: p.Transport()}
	cfg.WorkDir = c.workDir
	m, err := New(cfg)
	must(t, err)
	c.m = m
	c.msg = message{ActivityID: "act-1", ChatKey: "canvas:" + p.WorkspaceID(), Route: ledger.Route{Kind: routeNotify, Workspace: p.WorkspaceID()}}
	if kind == routeA2A {
		c.msg.ChatKey, c.msg.Route = "peer:peer-1", ledger.Route{Kind: routeA2A, Workspace: "peer-1"}
	}
	c.dir = chatfiles.Folder(c.workDir, c.msg.ChatKey)
	return c
}

// send calls send_file for path as codex does, in the message's current attempt.
func (c *fileChat) send(t *testing.T, path string) appserver.ToolResult {
	t.Helper()
	args, err := json.Marshal(chatfiles.Args{Path: path})
	must(t, err)
	if c.tool == nil {
		c.tool = c.m.replies.sendFileTool(c.msg)
	}
	return c.tool(context.Background(), appserver.ToolCall{Tool: chatfiles.ToolName, Arguments: args})
}

// write makes a file of n bytes in the chat's folder.
func (c *fileChat) write(t *testing.T, name string, n int) {
	t.Helper()
	must(t, os.MkdirAll(c.dir, 0o700))
	must(t, os.WriteFile(filepath.Join(c.dir, name), []byte(strings.Repeat("x", n)), 0o600))
}

// refused checks that send_file(path) was refused, naming path as written and saying why (in
// the tool's answer and in the reply), with no host path in either; and that the daemon's log
// has the cause, naming logged.
func (c *fileChat) refused(t *testing.T, path, why, logged string) {
	t.Helper()
	res := c.send(t, path)
	want := path + " not sent: "
	if res.OK || !strings.HasPrefix(res.Text, want) || !strings.Contains(res.Text, why) ||
		strings.Contains(res.Text, c.workDir) || strings.Contains(res.Text, c.stateDir) {
		t.Errorf("send_file(%q) = %+v; want it refused because %q, with no host path", path, res, why)
	}
	text, _ := withFiles(c.m.replies.takeBox(c.msg.ActivityID), "done")
	c.tool = nil // the reply took the box: the next send is another attempt's
	if !strings.Contains(text, "["+res.Text+"]") || strings.Contains(text, c.workDir) || strings.Contains(text, c.stateDir) {
		t.Errorf("reply %q; want the refusal %q and no host path", text, res.Text)
	}
	entries := c.logs.FilterMessage("file not sent").All()
	if len(entries) == 0 {
		t.Fatal("the refusal was not logged")
	}
	if cause, _ := entries[len(entries)-1].ContextMap()["cause"].(string); !strings.Contains(cause, logged) {
		t.Errorf("logged %v; want the cause naming %s", entries[len(entries)-1].ContextMap(), logged)
	}
}

// A refusal's text reaches the canvas user and peer agents: it names the file as the agent wrote
// it and no path of the host's, whatever failed. The daemon's log has the paths.
func TestSendFileNamesNoHostPath(t *testing.T) {
	t.Parallel()
	t.Run("missing", func(t *testing.T) {
		t.Parallel()
		c := newFileChat(t, routeNotify)
		path := filepath.Join(chatfiles.ChatsDirName, filepath.Base(c.dir), "missing.txt")
		c.refused(t, path, "no such file", filepath.Join(c.dir, "missing.txt"))
	})
	t.Run("no outbox", func(t *testing.T) {
		t.Parallel()
		c := newFileChat(t, routeA2A)
		c.write(t, "report.txt", 10)
		must(t, os.WriteFile(filepath.Join(c.stateDir, outboxDirName), nil, 0o600))
		c.refused(t, "report.txt", "the outbox cannot be made", filepath.Join(c.stateDir, outboxDirName))
	})
	t.Run("no chat folder", func(t *testing.T) {
		t.Parallel()
		c := newFileChat(t, routeNotify)
		must(t, os.WriteFile(filepath.Join(c.workDir, chatfiles.ChatsDirName), nil, 0o600))
		c.refused(t, "report.txt", "no folder to send files from", filepath.Join(c.workDir, chatfiles.ChatsDirName))
	})
}

// A file too large is refused naming the limit that applies: the platform's limit a file, or, to
// a peer, what is left of the 11 MiB its reply's files travel inline in.
func TestSendFileTooLargeNamesTheLimit(t *testing.T) {
	t.Parallel()
	t.Run("canvas", func(t *testing.T) {
		t.Parallel()
		c := newFileChat(t, routeNotify)
		c.p.SetUploadLimits(moleculetest.UploadLimits{PerFileBytes: 1000, PerRequestBytes: 1000, MaxAttachmentsPerMessage: 10})
		c.write(t, "big.bin", 1001)
		if res := c.send(t, "big.bin"); res.OK || res.Text != "big.bin not sent: it is 1001 bytes, over the limit of 1000 bytes a file" {
			t.Errorf("send_file = %+v; want it refused as over the limit a file", res)
		}
	})
	t.Run("peer over the file limit", func(t *testing.T) {
		t.Parallel()
		c := newFileChat(t, routeA2A)
		c.p.SetUploadLimits(moleculetest.UploadLimits{PerFileBytes: 1000, PerRequestBytes: 1000, MaxAttachmentsPerMessage: 10})
		c.write(t, "big.bin", 1001)
		if res := c.send(t, "big.bin"); res.OK || res.Text != "big.bin not sent: it is 1001 bytes, over the limit of 1000 bytes a file" {
			t.Errorf("send_file = %+v; want it refused as over the limit a file", res)
		}
	})
	t.Run("peer over the reply's budget", func(t *testing.T) {
		t.Parallel()
		c := newFileChat(t, routeA2A)
		c.write(t, "ten.bin", 10<<20)
		c.write(t, "two.bin", 2<<20)
		if res := c.send(t, "ten.bin"); !res.OK {
			t.Fatalf("send_file(ten.bin) = %+v; want it taken", res)
		}
		want := "two.bin not sent: it is 2097152 bytes, over the 1048576 bytes left of this reply's budget of 11534336 bytes for files" +
			" (a peer gets the files of one reply inline, in one request)"
		if res := c.send(t, "two.bin"); res.OK || res.Text != want {
			t.Errorf("send_file(two.bin) = %+v; want %q", res, want)
		}
	})
}
