package local

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/internal/health"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// tempErr is an accept error http.Server retries after logging "http: Accept error".
type tempErr struct{}

func (tempErr) Error() string   { return "accept: too many open files" }
func (tempErr) Timeout() bool   { return false }
func (tempErr) Temporary() bool { return true }

// flakyListener fails its first Accept with a temporary error and its second for good.
type flakyListener struct {
	calls int
}

func (l *flakyListener) Accept() (net.Conn, error) {
	l.calls++
	if l.calls == 1 {
		return nil, tempErr{}
	}
	return nil, net.ErrClosed
}

func (l *flakyListener) Close() error   { return nil }
func (l *flakyListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// Go's HTTP server reports accept errors (out of file descriptors) through its ErrorLog: they
// reach the daemon's zap logger as a warning, not a bare line on stderr that breaks JSON logs.
func TestLocalServerAcceptErrorsGoThroughZap(t *testing.T) {
	t.Parallel()
	log, logs := newTestLogger(t)
	h, err := New(Config{Answerer: chattest.NewAnswerer(nil), Logger: log})
	must(t, err)
	srv := h.Server()
	if err := srv.Serve(&flakyListener{}); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Serve: %v", err)
	}
	var found bool
	for _, e := range logs.All() {
		if strings.Contains(e.Message, "http: Accept error") {
			found = true
			if e.Level != zapcore.WarnLevel || e.LoggerName != "bridge.local.http" {
				t.Errorf("accept error logged at %s by %q, want warn by bridge.local.http", e.Level, e.LoggerName)
			}
		}
	}
	if !found {
		t.Fatalf("no http: Accept error in the log: %v", logs.All())
	}
}

// A turn that ran and failed is answered 200 with codex's error, and logged at warn with that
// error: an operator filtering for warnings sees failing turns.
func TestLocalInboxFailedTurnLoggedAtWarn(t *testing.T) {
	t.Parallel()
	log, logs := newTestLogger(t)
	a := chattest.NewAnswerer(func(_ context.Context, key, _ string) (supervisor.Reply, error) {
		return supervisor.Reply{ChatKey: key, ThreadID: "th", TurnID: "tu", Status: "failed", Error: "model 500", Duration: time.Second}, nil
	})
	h, err := New(Config{Answerer: a, Logger: log})
	must(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/v1/chats/k/messages", "application/json", strings.NewReader(`{"text":"hi"}`))
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP %d", resp.StatusCode)
	}
	entries := logs.FilterField(zapcore.Field{Key: "turn_error", Type: zapcore.StringType, String: "model 500"}).All()
	if len(entries) != 1 || entries[0].Level != zapcore.WarnLevel {
		t.Fatalf("want one warn entry with turn_error, got %v", logs.All())
	}
}

// The local inbox serves the liveness and readiness probes at /v1/healthz, /v1/readyz and their
// unversioned names, /readyz answering what the configured Readiness says (503 with the reason
// when a check fails). The probes pass the same request guard as every other request.
func TestLocalInboxProbes(t *testing.T) {
	t.Parallel()
	var loginErr error
	ready := health.NewReadiness(health.Config{Checks: []health.Check{
		{Name: "codex_login", Run: func(context.Context) error { return loginErr }},
	}})
	h, err := New(Config{Answerer: chattest.NewAnswerer(nil), Ready: ready})
	must(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		must(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		must(t, err)
		return resp.StatusCode, string(b)
	}
	for _, p := range []string{"/healthz", "/v1/healthz"} {
		if code, body := get(p); code != http.StatusOK || !strings.Contains(body, `"status":"ok"`) {
			t.Errorf("GET %s: %d %s", p, code, body)
		}
	}
	for _, p := range []string{"/readyz", "/v1/readyz"} {
		if code, body := get(p); code != http.StatusOK || !strings.Contains(body, `"status":"ready"`) {
			t.Errorf("GET %s while ready: %d %s", p, code, body)
		}
	}
	loginErr = errors.New("codex is not logged in")
	for _, p := range []string{"/readyz", "/v1/readyz"} {
		if code, body := get(p); code != http.StatusServiceUnavailable || !strings.Contains(body, `"reason":"codex_login: codex is not logged in"`) {
			t.Errorf("GET %s while not logged in: %d %s", p, code, body)
		}
	}
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/readyz", nil)
	must(t, err)
	req.Host = "evil.example"
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("readyz with a foreign Host: %d, want 421", resp.StatusCode)
	}
}
