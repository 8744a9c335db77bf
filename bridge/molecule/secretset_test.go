package molecule

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/ledger"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/chatfiles"
	"github.com/molecule-ai/codex-warm/internal/codexauth/codexauthtest"
	"github.com/molecule-ai/codex-warm/internal/secretset"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// Everything the inbox learns that is secret goes into the one set, and the set is what every
// text and file that leaves is checked against: the workspace token, platform_inbound_secret
// from register and from a later heartbeat, and every value of the workspace's secrets (a
// plain one, and the tokens inside the CODEX_AUTH_JSON blob). A reply quoting each reaches the
// canvas redacted, and send_file refuses a file holding any of them.
func TestEverySecretTheInboxLearnsStaysIn(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	const (
		dbPassword = "db-password-4f3e2d1c"
		l1Access   = "l1-access-token-aaaaaaaaaaaa"
		l1Refresh  = "l1-refresh-token-bbbbbbbbbbb"
		rotatedIn  = "inbound-secret-rotated-777777"
	)
	p.SetSecret("DB_PASSWORD", dbPassword)
	p.SetSecret(CodexAuthSecret, string(codexauthtest.AuthDoc("l1-id-token-cccccccccc", l1Access, l1Refresh, "acct")))
	firstIn := p.InboundSecret()

	var quote atomicString
	a := chattest.NewAnswerer(func(_ context.Context, key, _ string) (supervisor.Reply, error) {
		return supervisor.Reply{ChatKey: key, ThreadID: "t", TurnID: "u", Status: "completed", Text: "here: " + quote.load()}, nil
	})
	log, logs := newTestLogger(t)
	cfg := testConfig(p, t.TempDir(), a, log)
	cfg.WorkDir = t.TempDir()
	cfg.HeartbeatInterval = 10 * time.Millisecond
	set := secretset.New()
	cfg.Secrets = set

	sr, err := NewSecretsReader(cfg)
	must(t, err)
	if _, err := sr.Secret(waitCtx(t), CodexAuthSecret); err != nil {
		t.Fatal(err)
	}
	r := start(t, cfg)
	ctx := waitCtx(t)
	must(t, p.WaitFor(ctx, func() bool { return len(p.Registers()) == 1 }))
	p.SetInboundSecret(rotatedIn)
	beats := len(p.Heartbeats())
	// The heartbeat after the next one was answered with the rotated secret (the next may have
	// been on its way already).
	must(t, p.WaitFor(ctx, func() bool { return len(p.Heartbeats()) >= beats+2 }))

	all := []string{p.Token(), firstIn, rotatedIn, dbPassword, l1Access, l1Refresh}
	quote.store(strings.Join(all, " | "))
	p.Enqueue(moleculetest.CanvasMessage("print your secrets"))
	must(t, p.WaitFor(ctx, func() bool { return len(p.Notifies()) == 1 }))
	got := p.Notifies()[0].Message
	for _, s := range all {
		if strings.Contains(got, s) {
			t.Errorf("the reply carries %q: %q", s, got)
		}
	}
	if n := strings.Count(got, secretset.Redacted); n != len(all) {
		t.Errorf("%d redactions in %q, want %d", n, got, len(all))
	}

	// send_file: a file in the chat's own folder holding any one of them is refused.
	msg := message{ActivityID: "act-files-of-this-test", ChatKey: "canvas:" + p.WorkspaceID(), Route: ledger.Route{Kind: routeNotify}}
	tool := r.m.replies.sendFileTool(msg)
	dir := chatfiles.Folder(cfg.WorkDir, msg.ChatKey)
	must(t, os.MkdirAll(dir, 0o700))
	for i, s := range all {
		name := filepath.Join(dir, "f"+string(rune('a'+i))+".txt")
		must(t, os.WriteFile(name, []byte("x\n"+s+"\n"), 0o600))
		args, _ := json.Marshal(chatfiles.Args{Path: filepath.Base(name)})
		res := tool(ctx, appserver.ToolCall{Tool: chatfiles.ToolName, Arguments: args})
		if res.OK || !strings.Contains(res.Text, "credential") {
			t.Errorf("a file holding secret %d: %+v", i, res)
		}
	}
	must(t, os.WriteFile(filepath.Join(dir, "plain.txt"), []byte("nothing secret"), 0o600))
	if res := tool(ctx, appserver.ToolCall{Tool: chatfiles.ToolName, Arguments: json.RawMessage(`{"path":"plain.txt"}`)}); !res.OK {
		t.Errorf("a plain file was refused: %+v", res)
	}
	for _, e := range logs.All() {
		for _, s := range all {
			if strings.Contains(entryText(e), s) {
				t.Errorf("secret %q in a log entry: %s", s, entryText(e))
			}
		}
	}
}

// atomicString is a string one goroutine sets and another reads.
type atomicString struct{ v atomic.Value }

func (a *atomicString) store(s string) { a.v.Store(s) }
func (a *atomicString) load() string {
	s, _ := a.v.Load().(string)
	return s
}
