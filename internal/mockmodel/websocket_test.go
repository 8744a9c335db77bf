package mockmodel

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// wsClient is a test client of the mock's websocket, speaking as codex does.
type wsClient struct {
	t *testing.T
	c *websocket.Conn
}

// dialWS opens a websocket to m's /v1/responses with bearer (none when empty).
func dialWS(ctx context.Context, t *testing.T, m *Model, bearer string, client *http.Client) (*wsClient, *http.Response, error) {
	t.Helper()
	u := "ws" + strings.TrimPrefix(m.URL(), "http") + "/responses"
	opts := &websocket.DialOptions{CompressionMode: websocket.CompressionContextTakeover, HTTPClient: client}
	if bearer != "" {
		opts.HTTPHeader = http.Header{"Authorization": {"Bearer " + bearer}}
	}
	c, resp, err := websocket.Dial(ctx, u, opts)
	if err != nil {
		return nil, resp, err
	}
	c.SetReadLimit(maxWSMessage)
	t.Cleanup(func() { _ = c.CloseNow() })
	return &wsClient{t: t, c: c}, resp, nil
}

func mustDialWS(ctx context.Context, t *testing.T, m *Model) *wsClient {
	t.Helper()
	c, _, err := dialWS(ctx, t, m, "", nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	return c
}

// create sends a response.create message and reads its events up to response.completed or an
// error event.
func (w *wsClient) create(ctx context.Context, msg map[string]any) ([]map[string]any, error) {
	w.t.Helper()
	msg["type"] = "response.create"
	b, err := json.Marshal(msg)
	if err != nil {
		w.t.Fatal(err)
	}
	if err := w.c.Write(ctx, websocket.MessageText, b); err != nil {
		return nil, err
	}
	var events []map[string]any
	for {
		_, data, err := w.c.Read(ctx)
		if err != nil {
			return events, err
		}
		var ev map[string]any
		if err := json.Unmarshal(data, &ev); err != nil {
			w.t.Fatalf("event %s: %v", data, err)
		}
		events = append(events, ev)
		if ev["type"] == "response.completed" || ev["type"] == "error" {
			return events, nil
		}
	}
}

func eventTypes(events []map[string]any) []string {
	var types []string
	for _, ev := range events {
		types = append(types, ev["type"].(string))
	}
	return types
}

func responseID(t *testing.T, events []map[string]any) string {
	t.Helper()
	last := events[len(events)-1]
	resp, _ := last["response"].(map[string]any)
	id, _ := resp["id"].(string)
	if last["type"] != "response.completed" || id == "" {
		t.Fatalf("no completed response in %v", events)
	}
	return id
}

// TestMockModelWebsocketConversation plays codex's websocket exchange: a warm-up with
// generate:false, a first request continuing it, and a second sending only the new input.
// Scripts see the whole conversation each time; the warm-up reaches no script.
func TestMockModelWebsocketConversation(t *testing.T) {
	checkMockLeaks(t)
	m := newTestMock(t, Config{})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := mustDialWS(ctx, t, m)
	if err := m.WaitWebsockets(ctx, 1); err != nil {
		t.Fatal(err)
	}

	prefix := codexPrefixItems()
	warm, err := c.create(ctx, map[string]any{"model": "mock-model", "input": prefix[:1], "generate": false})
	if err != nil {
		t.Fatal(err)
	}
	if got := eventTypes(warm); strings.Join(got, ",") != "response.created,response.completed" {
		t.Fatalf("warm-up events %v, want created and completed only", got)
	}
	warmID := responseID(t, warm)
	if m.RequestCount() != 0 || len(m.Warmups()) != 1 {
		t.Fatalf("after the warm-up: %d requests, %d warm-ups; want 0 and 1", m.RequestCount(), len(m.Warmups()))
	}

	first, err := c.create(ctx, map[string]any{"model": "mock-model", "previous_response_id": warmID,
		"input": append(prefix[1:], inputMsg("user", "hello"))})
	if err != nil {
		t.Fatal(err)
	}
	if got := eventTypes(first); strings.Join(got, ",") != "response.created,response.output_item.done,response.completed" {
		t.Fatalf("events %v", got)
	}
	item := first[1]["item"].(map[string]any)
	second, err := c.create(ctx, map[string]any{"model": "mock-model", "previous_response_id": responseID(t, first),
		"input": []any{inputMsg("user", "again")}})
	if err != nil {
		t.Fatal(err)
	}
	text := second[1]["item"].(map[string]any)["content"].([]any)[0].(map[string]any)["text"]
	if text != "reply #2: again" {
		t.Errorf("second reply %q, want the whole conversation counted", text)
	}

	reqs := m.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	r := reqs[1]
	if !r.Websocket || r.PreviousResponseID != "resp_1" || r.Sent != 1 || !strings.Contains(string(r.Raw), `"again"`) || strings.Contains(string(r.Raw), `"hello"`) {
		t.Errorf("second request: websocket %v previous %q sent %d raw %s", r.Websocket, r.PreviousResponseID, r.Sent, r.Raw)
	}
	// The conversation: codex's prefix, hello, the assistant's answer as sent, again.
	if len(r.Input) != len(prefix)+3 || !strings.Contains(string(r.Input[len(prefix)+1]), item["id"].(string)) {
		t.Errorf("rebuilt input %d items, want %d with the first answer at %d: %s", len(r.Input), len(prefix)+3, len(prefix)+1, r.Input)
	}
	if strings.Join(r.UserTexts, "|") != "hello|again" {
		t.Errorf("user texts %q", r.UserTexts)
	}
	if w := m.Warmups()[0]; !w.Websocket || w.Sent != 1 || len(w.Raw) == 0 {
		t.Errorf("warm-up recorded as %+v", w)
	}
}

// TestMockModelWebsocketPreviousResponse: previous_response_id may name only the connection's
// last completed response, as the real API keeps only that one per connection; anything else is
// an error event and reaches no script.
func TestMockModelWebsocketPreviousResponse(t *testing.T) {
	checkMockLeaks(t)
	m := newTestMock(t, Config{})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := mustDialWS(ctx, t, m)
	first, err := c.create(ctx, map[string]any{"input": []any{inputMsg("user", "one")}})
	if err != nil {
		t.Fatal(err)
	}
	id := responseID(t, first)
	other := mustDialWS(ctx, t, m)
	for name, conn := range map[string]*wsClient{"unknown id": c, "another connection's id": other} {
		prev := id
		if conn == c {
			prev = "resp_404"
		}
		events, err := conn.create(ctx, map[string]any{"previous_response_id": prev, "input": []any{inputMsg("user", "two")}})
		if err != nil {
			t.Fatal(err)
		}
		errBody, _ := events[len(events)-1]["error"].(map[string]any)
		if len(events) != 1 || events[0]["type"] != "error" || events[0]["status"] != float64(400) || errBody["code"] != codePreviousNotFound {
			t.Errorf("%s: events %v, want one previous_response_not_found error", name, events)
		}
	}
	if m.RequestCount() != 1 {
		t.Errorf("%d requests reached the script, want 1", m.RequestCount())
	}
	// A scripted HTTP status travels as an error event carrying it.
	events, err := c.create(ctx, map[string]any{"input": []any{inputMsg("user", KeywordFail)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0]["type"] != "error" || events[0]["status"] != float64(http.StatusInternalServerError) {
		t.Errorf("FAIL over the websocket: events %v", events)
	}
	if got := m.Unhandled(); len(got) != 0 {
		t.Errorf("unhandled %v", got)
	}
}

// TestMockModelWebsocketServerClose: CloseWebsockets closes every websocket from the server's
// side with 1001, a hung response on one included; Config.MaxConnAge does it to an idle
// websocket on its own.
func TestMockModelWebsocketServerClose(t *testing.T) {
	checkMockLeaks(t)
	m := newTestMock(t, Config{})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	idle := mustDialWS(ctx, t, m)
	hung := mustDialWS(ctx, t, m)
	// The dial returns on the 101; the mock registers the websocket right after.
	if err := m.WaitOpenWebsockets(ctx, 2); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := hung.create(ctx, map[string]any{"input": []any{inputMsg("user", KeywordHang)}})
		done <- err
	}()
	if err := m.WaitHung(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// The idle client reads, as codex does, so it answers the close at once.
	idleRead := make(chan error, 1)
	go func() {
		_, _, err := idle.c.Read(ctx)
		idleRead <- err
	}()
	if n := m.CloseWebsockets(); n != 2 {
		t.Errorf("CloseWebsockets closed %d, want 2", n)
	}
	if err := <-done; websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Errorf("hung response ended with %v, want a going-away close", err)
	}
	if err := <-idleRead; websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Errorf("idle websocket read %v, want a going-away close", err)
	}
	if err := m.WaitOpenWebsockets(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := m.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}

	aged := newTestMock(t, Config{MaxConnAge: time.Millisecond})
	c := mustDialWS(ctx, t, aged)
	if _, _, err := c.c.Read(ctx); websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Errorf("old websocket read %v, want a going-away close", err)
	}
	if aged.Websockets() != 1 {
		t.Errorf("accepted %d websockets", aged.Websockets())
	}
}

// TestMockModelWebsocketCloseReleasesHang: Close ends a hung websocket response and returns
// with nothing left running, and a client going away releases its hung response.
func TestMockModelWebsocketCloseReleasesHang(t *testing.T) {
	checkMockLeaks(t)
	m, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	gone := mustDialWS(ctx, t, m)
	stays := mustDialWS(ctx, t, m)
	for _, c := range []*wsClient{gone, stays} {
		b, _ := json.Marshal(map[string]any{"type": "response.create", "input": []any{inputMsg("user", KeywordHang)}})
		if err := c.c.Write(ctx, websocket.MessageText, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.WaitHung(ctx, 2); err != nil {
		t.Fatal(err)
	}
	_ = gone.c.CloseNow()
	if err := m.WaitOpenWebsockets(ctx, 1); err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() {
		for {
			if _, _, err := stays.c.Read(ctx); err != nil {
				read <- err
				return
			}
		}
	}()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-read; websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Errorf("client read %v after Close, want a going-away close", err)
	}
	if m.OpenWebsockets() != 0 || m.InFlight() != 0 {
		t.Errorf("after Close: %d open websockets, %d in flight", m.OpenWebsockets(), m.InFlight())
	}
}

// TestMockModelWebsocketRefusals: a refused bearer is answered 401 at the upgrade, as over
// HTTP; Config.HTTPOnly refuses upgrades and leaves codex's config on HTTP.
func TestMockModelWebsocketRefusals(t *testing.T) {
	checkMockLeaks(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var revoked atomic.Bool
	m := newTestMock(t, Config{Authorize: func(b string) bool { return b == "good" && !revoked.Load() }})
	if _, resp, err := dialWS(ctx, t, m, "bad", nil); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("bad bearer: %v, want 401", err)
	}
	if m.Unauthorized() != 1 {
		t.Errorf("unauthorized %d", m.Unauthorized())
	}
	c, _, err := dialWS(ctx, t, m, "good", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.create(ctx, map[string]any{"input": []any{inputMsg("user", "hi")}}); err != nil {
		t.Fatal(err)
	}
	if r := m.Requests(); len(r) != 1 || r[0].Bearer != "good" {
		t.Errorf("requests %+v, want one with the upgrade's bearer", r)
	}
	// A token that goes bad while the websocket is open is refused per request.
	revoked.Store(true)
	events, err := c.create(ctx, map[string]any{"input": []any{inputMsg("user", "revoked")}})
	if err != nil {
		t.Fatal(err)
	}
	errBody, _ := events[0]["error"].(map[string]any)
	if len(events) != 1 || events[0]["status"] != float64(http.StatusUnauthorized) || errBody["code"] != "token_expired" {
		t.Errorf("request with a revoked token: %v, want a 401 error event", events)
	}
	if m.RequestCount() != 1 || m.Unauthorized() != 2 {
		t.Errorf("%d requests, %d refused; want 1 and 2", m.RequestCount(), m.Unauthorized())
	}

	h := newTestMock(t, Config{HTTPOnly: true})
	if _, resp, err := dialWS(ctx, t, h, "", nil); err == nil || resp == nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("HTTP-only upgrade: %v, want 404", err)
	}
	if got := h.Unhandled(); len(got) != 1 || got[0] != "GET /v1/responses" {
		t.Errorf("unhandled %v", got)
	}
	if strings.Contains(h.CodexConfig(), "supports_websockets") || !strings.Contains(m.CodexConfig(), "supports_websockets = true") {
		t.Errorf("configs:\nHTTP-only:\n%s\ndefault:\n%s", h.CodexConfig(), m.CodexConfig())
	}
}

// TestMockModelTLS: with Config.TLS the mock serves https and wss under a leaf certificate for
// 127.0.0.1 signed by a CA it generated (not the CA itself, which rustls refuses), and WriteCA
// writes that CA for SSL_CERT_FILE.
func TestMockModelTLS(t *testing.T) {
	checkMockLeaks(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	m := newTestMock(t, Config{TLS: true})
	if !strings.HasPrefix(m.URL(), "https://127.0.0.1:") {
		t.Fatalf("URL %s", m.URL())
	}
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := m.WriteCA(path); err != nil {
		t.Fatal(err)
	}
	pemBytes, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		t.Fatalf("no certificate in %s", pemBytes)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}
	client := &http.Client{Transport: tr}
	resp, err := postResponsesWith(ctx, t, client, m, inputMsg("user", "over https"))
	if err != nil {
		t.Fatal(err)
	}
	events, err := readSSE(resp.Body)
	resp.Body.Close()
	if err != nil || len(events) != 3 {
		t.Fatalf("https events %v, %v", events, err)
	}
	if leaf := resp.TLS.PeerCertificates[0]; leaf.IsCA || len(resp.TLS.PeerCertificates) != 1 {
		t.Errorf("server presents %d certificates, leaf IsCA %v", len(resp.TLS.PeerCertificates), leaf.IsCA)
	}
	c, _, err := dialWS(ctx, t, m, "", client)
	if err != nil {
		t.Fatalf("wss: %v", err)
	}
	if _, err := c.create(ctx, map[string]any{"input": []any{inputMsg("user", "over wss")}}); err != nil {
		t.Fatal(err)
	}
	_ = c.c.Close(websocket.StatusNormalClosure, "")
	if plain := newTestMock(t, Config{}); plain.WriteCA(path) == nil || plain.CACert() != nil {
		t.Error("a mock without TLS wrote a CA")
	}
	if _, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Get(m.URL() + "/models"); err == nil || !errors.As(err, new(*tls.CertificateVerificationError)) {
		t.Errorf("an untrusting client got %v, want a verification error", err)
	}
}
