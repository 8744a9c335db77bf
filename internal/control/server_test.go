package control

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// serve serves s on the control socket of a new state directory until the test ends, and
// returns a Client for it.
func serve(t *testing.T, s *Server) *Client {
	t.Helper()
	dir := t.TempDir()
	ln, err := Listen(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv := s.HTTPServer(nil)
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-served })
	return NewClient(dir)
}

type archiveReq struct {
	Chat string `json:"chat"`
}

type archiveAns struct {
	Archived string `json:"archived"`
}

// A verb is registered from outside the package with its request and answer types, and the
// Client calls it with them: the daemon adds verbs without a change here.
func TestRegisteredVerbRoundTrip(t *testing.T) {
	t.Parallel()
	s := NewServer()
	Handle(s, "POST /v1/archive", http.StatusOK, func(_ context.Context, r archiveReq) (archiveAns, error) {
		if r.Chat == "" {
			return archiveAns{}, Refuse(http.StatusUnprocessableEntity, errors.New("which chat? the request names none"))
		}
		return archiveAns{Archived: r.Chat}, nil
	})
	c := serve(t, s)
	ctx := context.Background()
	got, err := Call[archiveReq, archiveAns](ctx, c, "POST /v1/archive", archiveReq{Chat: "canvas:ws-1"}, time.Minute)
	if err != nil || got.Archived != "canvas:ws-1" {
		t.Fatalf("archive = %+v, %v; want canvas:ws-1 archived", got, err)
	}
	_, err = Call[archiveReq, archiveAns](ctx, c, "POST /v1/archive", archiveReq{}, time.Minute)
	var e *Error
	if !errors.As(err, &e) || e.Status != http.StatusUnprocessableEntity || e.Msg != "which chat? the request names none" {
		t.Fatalf("archive without a chat = %v, want the verb's refusal with HTTP 422", err)
	}
}

// A request that is not the verb's document is refused with 400 and a sentence naming the verb
// and what is wrong; the verb does not run.
func TestBadRequestIsRefused(t *testing.T) {
	t.Parallel()
	s := NewServer()
	var ran atomic.Bool
	Handle(s, "POST /v1/archive", http.StatusOK, func(context.Context, archiveReq) (archiveAns, error) {
		ran.Store(true)
		return archiveAns{}, nil
	})
	c := serve(t, s)
	for _, tc := range []struct{ name, body, says string }{
		{"not JSON", `chat=x`, "invalid character"},
		{"wrong type", `{"chat": 7}`, "cannot unmarshal number"},
		{"unknown field", `{"chat": "x", "all": true}`, `unknown field "all"`},
		{"two documents", `{"chat": "x"} {"chat": "y"}`, "more than one JSON document"},
	} {
		code, body, err := c.Do(context.Background(), "POST /v1/archive", []byte(tc.body), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		var ans errorAnswer
		_ = json.Unmarshal(body, &ans)
		msg := ans.Error
		if code != http.StatusBadRequest || !strings.Contains(msg, "POST /v1/archive: bad request") || !strings.Contains(msg, tc.says) {
			t.Errorf("%s: HTTP %d %s; want 400 naming the verb and saying %q", tc.name, code, msg, tc.says)
		}
	}
	if ran.Load() {
		t.Error("the verb ran on a bad request")
	}
}

// A verb the daemon does not serve gets 404 naming the ones it does (an older daemon asked by a
// newer command says which verbs it has); the Client returns it as an *Error.
func TestUnknownVerb(t *testing.T) {
	t.Parallel()
	s := NewServer()
	Handle(s, VerbStatus, http.StatusOK, func(context.Context, Empty) (StatusDoc, error) { return StatusDoc{}, nil })
	Handle(s, VerbStop, http.StatusAccepted, func(context.Context, Empty) (Empty, error) { return Empty{}, nil })
	c := serve(t, s)
	for _, verb := range []string{"POST /v1/archive", "GET /v1/stop", "GET /"} {
		_, err := Call[Empty, Empty](context.Background(), c, verb, Empty{}, time.Minute)
		var e *Error
		if !errors.As(err, &e) || e.Status != http.StatusNotFound || !strings.Contains(e.Msg, "unknown verb") ||
			!strings.Contains(e.Msg, "GET /v1/status, POST /v1/stop") {
			t.Errorf("%s: %v; want 404 saying unknown verb and naming the verbs served", verb, err)
		}
	}
}

// A request larger than MaxRequestBytes is refused with 413, whether it says its length or
// streams without one, and the verb does not run.
func TestOversizedRequestIsRefused(t *testing.T) {
	t.Parallel()
	s := NewServer()
	var ran atomic.Bool
	Handle(s, "POST /v1/archive", http.StatusOK, func(context.Context, archiveReq) (archiveAns, error) {
		ran.Store(true)
		return archiveAns{}, nil
	})
	c := serve(t, s)
	big := `{"chat": "` + strings.Repeat("x", MaxRequestBytes) + `"}`
	code, body, err := c.Do(context.Background(), "POST /v1/archive", []byte(big), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "larger than") {
		t.Errorf("with Content-Length: HTTP %d %s; want 413", code, body)
	}

	// Chunked: no Content-Length, so the limit binds while reading.
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", c.Path())
	}}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodPost, "http://supervisor/v1/archive", struct{ *strings.Reader }{strings.NewReader(big)})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || req.ContentLength != 0 {
		t.Errorf("chunked: HTTP %d (request length %d); want 413 for a request of unknown length", resp.StatusCode, req.ContentLength)
	}
	if ran.Load() {
		t.Error("the verb ran on an oversized request")
	}
}

// The control socket is private from its bind (mode 0600), and a socket file a daemon that
// died left behind is replaced.
func TestListenPrivateReplacesStaleSocket(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, SocketName)
	stale, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	if _, err := NewClient(dir).Status(context.Background()); !errors.Is(err, ErrNoDaemon) {
		t.Fatalf("status on a stale socket = %v, want ErrNoDaemon", err)
	}
	ln, err := Listen(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("the socket file has mode %v, want a socket 0600", fi.Mode())
	}
}

// The daemon's own verbs keep the wire older images speak: a reload refused answers 409 with
// {"error": …}, which decodes as ReloadAnswer.Error for an old command and as *Error for a new
// one; a stop answers 202 with or without a body.
func TestDaemonVerbsWire(t *testing.T) {
	t.Parallel()
	old := http.NewServeMux() // the control socket before the verbs were typed
	old.HandleFunc("POST /v1/reload", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"error":"a reload is already running"}` + "\n"))
	})
	old.HandleFunc("POST /v1/stop", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) })
	dir := t.TempDir()
	ln, err := Listen(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: old}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-served })
	c := NewClient(dir)
	_, err = c.Reload(context.Background())
	var e *Error
	if !errors.As(err, &e) || e.Status != http.StatusConflict || e.Msg != "a reload is already running" {
		t.Errorf("reload refused by an old image = %v, want *Error 409 with its reason", err)
	}
	if err := c.Stop(context.Background()); err != nil {
		t.Errorf("stop on an old image = %v", err)
	}

	s := NewServer()
	Handle(s, VerbReload, http.StatusAccepted, func(context.Context, Empty) (ReloadAnswer, error) {
		return ReloadAnswer{}, Refuse(http.StatusConflict, errors.New("a reload is already running"))
	})
	code, body, err := serve(t, s).Do(context.Background(), VerbReload, nil, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var ans ReloadAnswer
	if code != http.StatusConflict || json.Unmarshal(body, &ans) != nil || ans.Error != "a reload is already running" {
		t.Errorf("refused reload: HTTP %d %s; want 409 that an old command reads as ReloadAnswer.Error", code, body)
	}
}
