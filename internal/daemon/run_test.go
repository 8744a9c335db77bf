//go:build linux

package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/molecule-ai/codex-warm/appserver/appservertest"
	"github.com/molecule-ai/codex-warm/bridge/local"
	"github.com/molecule-ai/codex-warm/internal/control"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// syncBuffer is the daemon's log, written by its goroutines and read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Run, in this process as the binary calls it: the daemon starts on a local inbox with the real
// codex and a mock model, answers a chat through codex, reports itself on the control socket,
// and on the control socket's stop drains and returns nil, its codex child and every goroutine
// it started gone. Not parallel: the daemon's children take their CODEX_HOME from the process's
// environment, and Run catches the process's stop signals while it runs.
func TestRunServesAndStopsOnTheControlSocket(t *testing.T) {
	bin := appservertest.CodexBin(t)
	// Not t.TempDir: the control socket's path must stay under the 108 bytes of a unix socket
	// address.
	root, err := os.MkdirTemp("", "cwdaemon-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	mock, err := mockmodel.New(mockmodel.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mock.Close() })
	// What runs from here on is the daemon's, but for the mock model's listener.
	ignore := goleak.IgnoreCurrent()
	codexHome, work, state := filepath.Join(root, "home"), filepath.Join(root, "work"), filepath.Join(root, "state")
	for _, d := range []string{codexHome, work} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := mock.WriteCodexHome(codexHome); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CODEX_HOME", codexHome)

	log := &syncBuffer{}
	flags := func(name string, w io.Writer) *flag.FlagSet {
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		fs.SetOutput(w)
		return fs
	}
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), Program{Version: "test-1",
			Args: []string{"--inbox", "local", "--listen", "127.0.0.1:0", "--state-dir", state, "--codex-bin", bin,
				"--cwd", work, "--max-children", "2", "--drain-timeout", "5s", "--log-format", "json"},
			Flags: flags, Getenv: func(string) string { return "" }, Stdout: io.Discard, Stderr: log})
	}()

	cc := control.NewClient(state)
	var doc control.StatusDoc
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for doc.Daemon.Listen == "" {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		doc, _ = cc.Status(ctx)
		cancel()
		select {
		case err := <-done:
			t.Fatalf("Run returned %v before it served; log:\n%s", err, log)
		case <-deadline.C:
			t.Fatalf("the daemon did not answer on its control socket; log:\n%s", log)
		case <-tick.C:
		}
	}
	if doc.Daemon.PID != os.Getpid() || doc.Daemon.Version != "test-1" || doc.Daemon.Inbox != "local" || doc.Daemon.StateDir != state {
		t.Errorf("status = %+v, want this process, version test-1, the local inbox on %s", doc.Daemon, state)
	}

	tr := &http.Transport{}
	hc := &http.Client{Transport: tr, Timeout: time.Minute}
	body, _ := json.Marshal(local.Message{Text: "hello daemon"})
	resp, err := hc.Post("http://"+doc.Daemon.Listen+"/v1/chats/alpha/messages", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	tr.CloseIdleConnections()
	var r local.Reply
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &r) != nil || r.Text != "reply #1: hello daemon" || r.ThreadID == "" {
		t.Fatalf("POST: HTTP %d %s, want codex's reply; log:\n%s", resp.StatusCode, raw, log)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	doc, err = cc.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	child := 0
	for _, c := range doc.Snapshot.Children {
		if c.ChatKey == "alpha" && c.ThreadID == r.ThreadID {
			child = c.PID
		}
	}
	if child == 0 {
		t.Fatalf("status after the turn: %+v; want chat alpha's child on thread %s", doc.Snapshot.Children, r.ThreadID)
	}

	if err := cc.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v after a stop, want nil; log:\n%s", err, log)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("Run did not return after the stop; log:\n%s", log)
	}
	if err := syscall.Kill(child, 0); err == nil {
		t.Errorf("codex child %d still runs after Run returned", child)
	}
	if !strings.Contains(log.String(), "supervisor running") {
		t.Errorf("the log has no start line:\n%s", log)
	}
	goleak.VerifyNone(t, ignore)
}
