package local

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
)

// guardCase is one request against the local inbox's request guard.
type guardCase struct {
	name    string
	method  string
	path    string
	host    string            // Host header; "" keeps the listener's address
	headers map[string]string // on top of Content-Type: application/json
	noCT    bool              // send no Content-Type at all
	body    string
	status  int
	rule    string // ErrorReply.Rule expected; "" for answers that are not refusals
	has     string // in the body
}

func runGuardCases(t *testing.T, h http.Handler, a *chattest.Answerer, cases []guardCase) {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := len(a.Calls())
			method := tc.method
			if method == "" {
				method = "POST"
			}
			req, err := http.NewRequest(method, srv.URL+tc.path, strings.NewReader(tc.body))
			must(t, err)
			if !tc.noCT {
				req.Header.Set("Content-Type", "application/json")
			}
			for k, v := range tc.headers {
				req.Header.Set(k, v)
			}
			if tc.host != "" {
				req.Host = tc.host
			}
			resp, err := srv.Client().Do(req)
			must(t, err)
			defer resp.Body.Close()
			raw, err := io.ReadAll(resp.Body)
			must(t, err)
			if resp.StatusCode != tc.status {
				t.Errorf("status = %d, want %d (%s)", resp.StatusCode, tc.status, raw)
			}
			var le ErrorReply
			if err := json.Unmarshal(raw, &le); err != nil {
				t.Fatalf("body is not JSON: %v: %s", err, raw)
			}
			if le.Rule != tc.rule {
				t.Errorf("rule = %q, want %q (%s)", le.Rule, tc.rule, raw)
			}
			if !strings.Contains(string(raw), tc.has) {
				t.Errorf("body = %s, want it to contain %s", raw, tc.has)
			}
			if tc.status != http.StatusOK {
				if got := a.Calls()[before:]; len(got) != 0 {
					t.Errorf("a refused request ran a turn: %v", got)
				}
			}
		})
	}
}

// Any web page open in a browser can send a CORS "simple request" (text/plain, no preflight) to a
// loopback port, and DNS rebinding lets it read the answer under its own host name. The inbox
// refuses what a browser attack needs: a foreign Host, an Origin, a non-JSON content type.
func TestLocalInboxRefusesBrowserRequests(t *testing.T) {
	t.Parallel()
	a := chattest.NewAnswerer(nil)
	h, err := New(Config{Answerer: a})
	must(t, err)
	msg := "/v1/chats/peer:alice/messages"
	runGuardCases(t, h, a, []guardCase{
		{name: "the attack from outside testing", path: msg, noCT: true,
			headers: map[string]string{"Content-Type": "text/plain", "Origin": "http://evil.example"},
			host:    "evil.example:8377", body: `{"text":"rm -rf ~"}`, status: 421, rule: "host"},
		{name: "rebinding host alone", path: msg, host: "evil.example:8377", body: `{"text":"x"}`, status: 421, rule: "host", has: "evil.example"},
		{name: "rebinding host without port", path: msg, host: "evil.example", body: `{"text":"x"}`, status: 421, rule: "host"},
		{name: "host that only starts like localhost", path: msg, host: "localhost.evil.example", body: `{"text":"x"}`, status: 421, rule: "host"},
		{name: "healthz checks the host too", method: "GET", path: "/v1/healthz", host: "evil.example", noCT: true, status: 421, rule: "host"},
		{name: "origin of a web page", path: msg, headers: map[string]string{"Origin": "http://evil.example"}, body: `{"text":"x"}`, status: 403, rule: "origin"},
		{name: "origin null (sandboxed frame, file://)", path: msg, headers: map[string]string{"Origin": "null"}, body: `{"text":"x"}`, status: 403, rule: "origin"},
		{name: "origin of localhost itself", path: msg, headers: map[string]string{"Origin": "http://localhost:8377"}, body: `{"text":"x"}`, status: 403, rule: "origin"},
		{name: "text/plain simple request", path: msg, noCT: true, headers: map[string]string{"Content-Type": "text/plain"}, body: `{"text":"x"}`, status: 415, rule: "content-type"},
		{name: "form simple request", path: msg, noCT: true, headers: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, body: `{"text":"x"}`, status: 415, rule: "content-type"},
		{name: "no content type", path: msg, noCT: true, body: `{"text":"x"}`, status: 415, rule: "content-type"},
		{name: "json with charset", path: msg, headers: map[string]string{"Content-Type": "application/json; charset=utf-8"}, body: `{"text":"x"}`, status: 200, has: "echo: x"},
		{name: "localhost host", path: msg, host: "localhost:8377", body: `{"text":"x"}`, status: 200, has: "echo: x"},
		{name: "ipv6 loopback host", path: msg, host: "[::1]:8377", body: `{"text":"x"}`, status: 200, has: "echo: x"},
		{name: "127.0.0.2 host", path: msg, host: "127.0.0.2", body: `{"text":"x"}`, status: 200, has: "echo: x"},
		{name: "healthz from curl", method: "GET", path: "/v1/healthz", noCT: true, status: 200, has: `"status":"ok"`},
	})
}

// Bodies are parsed strictly: what encoding/json would silently accept is an error the caller
// can see.
func TestLocalInboxStrictBody(t *testing.T) {
	t.Parallel()
	a := chattest.NewAnswerer(nil)
	h, err := New(Config{Answerer: a})
	must(t, err)
	msg := "/v1/chats/k/messages"
	runGuardCases(t, h, a, []guardCase{
		{name: "trailing object", path: msg, body: `{"text":"a"}{"text":"b"}`, status: 400, rule: "body"},
		{name: "trailing garbage", path: msg, body: `{"text":"a"} trailing`, status: 400, rule: "body"},
		{name: "duplicate text key", path: msg, body: `{"text":"harmless","text":"rm -rf ~"}`, status: 400, rule: "body", has: "duplicate"},
		{name: "invalid utf-8", path: msg, body: "{\"text\":\"a\xffb\"}", status: 400, rule: "body", has: "UTF-8"},
		{name: "trailing whitespace is fine", path: msg, body: "{\"text\":\"a\"}\n\t ", status: 200, has: "echo: a"},
		{name: "unknown members are tolerated", path: msg, body: `{"text":"a","client":"x"}`, status: 200, has: "echo: a"},
	})
}

// With a token set every request needs it, healthz included.
func TestLocalInboxToken(t *testing.T) {
	t.Parallel()
	a := chattest.NewAnswerer(nil)
	h, err := New(Config{Answerer: a, Token: "s3cret-token"})
	must(t, err)
	msg := "/v1/chats/k/messages"
	runGuardCases(t, h, a, []guardCase{
		{name: "no token", path: msg, body: `{"text":"x"}`, status: 401, rule: "token"},
		{name: "wrong token", path: msg, headers: map[string]string{"Authorization": "Bearer s3cret-tokeN"}, body: `{"text":"x"}`, status: 401, rule: "token"},
		{name: "prefix of the token", path: msg, headers: map[string]string{"Authorization": "Bearer s3cret"}, body: `{"text":"x"}`, status: 401, rule: "token"},
		{name: "basic scheme", path: msg, headers: map[string]string{"Authorization": "Basic s3cret-token"}, body: `{"text":"x"}`, status: 401, rule: "token"},
		{name: "healthz without token", method: "GET", path: "/v1/healthz", noCT: true, status: 401, rule: "token"},
		{name: "right token", path: msg, headers: map[string]string{"Authorization": "Bearer s3cret-token"}, body: `{"text":"x"}`, status: 200, has: "echo: x"},
		{name: "scheme is case-insensitive", path: msg, headers: map[string]string{"Authorization": "bearer s3cret-token"}, body: `{"text":"x"}`, status: 200, has: "echo: x"},
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/v1/healthz")
	must(t, err)
	resp.Body.Close()
	if got := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
		t.Errorf("401 without WWW-Authenticate: Bearer (got %q)", got)
	}
}

// Configured hosts and origins are accepted; everything else still is not.
func TestLocalInboxAllowedHostsAndOrigins(t *testing.T) {
	t.Parallel()
	a := chattest.NewAnswerer(nil)
	h, err := New(Config{Answerer: a, Token: "t",
		AllowedHosts: []string{"inbox.internal"}, AllowedOrigins: []string{"https://console.example"}})
	must(t, err)
	msg := "/v1/chats/k/messages"
	auth := func(extra map[string]string) map[string]string {
		m := map[string]string{"Authorization": "Bearer t"}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	runGuardCases(t, h, a, []guardCase{
		{name: "configured host", path: msg, host: "inbox.internal:8377", headers: auth(nil), body: `{"text":"x"}`, status: 200, has: "echo: x"},
		{name: "configured host, any case", path: msg, host: "INBOX.internal", headers: auth(nil), body: `{"text":"x"}`, status: 200, has: "echo: x"},
		{name: "other host", path: msg, host: "evil.example", headers: auth(nil), body: `{"text":"x"}`, status: 421, rule: "host"},
		{name: "allowed origin", path: msg, headers: auth(map[string]string{"Origin": "https://console.example"}), body: `{"text":"x"}`, status: 200, has: "echo: x"},
		{name: "allowed origin on another port", path: msg, headers: auth(map[string]string{"Origin": "https://console.example:444"}), body: `{"text":"x"}`, status: 403, rule: "origin"},
	})
}

// A connection that sent its headers and then trickles (or never sends) its body is cut after
// BodyTimeout, and the message never reaches codex.
func TestLocalInboxSlowBodyIsCut(t *testing.T) {
	t.Parallel()
	a := chattest.NewAnswerer(nil)
	h, err := New(Config{Answerer: a, BodyTimeout: 200 * time.Millisecond})
	must(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, tc := range []struct {
		name string
		sent string // body bytes sent before stalling
	}{{"never sends the body", ""}, {"stalls half way", `{"text":"hel`}} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			must(t, err)
			defer conn.Close()
			// The bound only detects a hang: the server must close long before it.
			must(t, conn.SetDeadline(time.Now().Add(waitTimeout)))
			fmt.Fprintf(conn, "POST /v1/chats/k/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n%s", tc.sent)
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			must(t, err)
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestTimeout {
				t.Errorf("status = %d, want 408 (%s)", resp.StatusCode, raw)
			}
			if _, err := conn.Read(make([]byte, 1)); err == nil {
				t.Error("connection still open after the body timeout")
			}
			if got := a.Calls(); len(got) != 0 {
				t.Errorf("a cut request ran a turn: %v", got)
			}
		})
	}
}

// Past MaxConns a connection is answered 503 at once and closed, so stalled clients cannot use
// up the process's file descriptors; once the stalled ones are cut, callers get through again.
func TestLocalInboxConnectionLimit(t *testing.T) {
	t.Parallel()
	a := chattest.NewAnswerer(nil)
	h, err := New(Config{Answerer: a, BodyTimeout: 300 * time.Millisecond})
	must(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	lim := LimitConns(ln, 3, nil)
	srv := h.Server()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lim) }()
	defer func() {
		must(t, srv.Close())
		if err := <-served; err != http.ErrServerClosed {
			t.Errorf("Serve: %v", err)
		}
	}()
	addr := ln.Addr().String()

	// Three clients send headers and stall in their bodies: they hold every slot.
	var stalled []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", addr)
		must(t, err)
		defer c.Close()
		fmt.Fprintf(c, "POST /v1/chats/k/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
		stalled = append(stalled, c)
	}
	// The server counts a connection when it accepts it; wait for that, not for time.
	ctx := waitCtx(t)
	for lim.Open() < 3 {
		select {
		case <-ctx.Done():
			t.Fatalf("server accepted %d of 3 connections", lim.Open())
		case <-time.After(5 * time.Millisecond):
		}
	}
	c, err := net.Dial("tcp", addr)
	must(t, err)
	defer c.Close()
	must(t, c.SetDeadline(time.Now().Add(waitTimeout)))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	must(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(raw), `"rule":"connections"`) {
		t.Errorf("connection past the limit: %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), raw)
	}
	if lim.Refused() != 1 {
		t.Errorf("refused = %d, want 1", lim.Refused())
	}
	// The stalled clients are cut by the body timeout (an event the test waits for), and the
	// slots come back.
	for _, s := range stalled {
		must(t, s.SetDeadline(time.Now().Add(waitTimeout)))
		if _, err := io.ReadAll(s); err != nil {
			t.Errorf("stalled connection not closed by the server: %v", err)
		}
	}
	// The server releases a slot before it closes the socket, so every slot is free by now.
	if lim.Open() != 0 {
		t.Errorf("open connections after the stalled ones were cut: %d", lim.Open())
	}
	resp, err = (&http.Client{Timeout: waitTimeout}).Post("http://"+addr+"/v1/chats/k/messages", "application/json", strings.NewReader(`{"text":"after"}`))
	must(t, err)
	raw, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(raw), "echo: after") {
		t.Errorf("after the stalled clients were cut: %d %s", resp.StatusCode, raw)
	}
	if got := a.Calls(); len(got) != 1 || got[0].Text != "after" {
		t.Errorf("turns run: %v, want only the one after the stall", got)
	}
}
