package local

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// slowReaderAnswer is larger than what the kernel buffers between the server and a client whose
// receive buffer is small (the send buffer grows to 4 MiB at most): writing it blocks until the
// client reads.
const slowReaderAnswer = 8 << 20

// dialNonReader connects with a tiny receive buffer (set before connect, so the window the
// client offers stays small), sends a request and never reads.
func dialNonReader(t *testing.T, addr, accept string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		if err != nil {
			return err
		}
		return serr
	}}
	c, err := d.Dial("tcp", addr)
	must(t, err)
	t.Cleanup(func() { _ = c.Close() })
	body := `{"text":"big"}`
	fmt.Fprintf(c, "POST /v1/chats/k/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: %s\r\nContent-Length: %d\r\n\r\n%s", accept, len(body), body)
	return c
}

// Clients that stop reading are cut (issue 17, item 6): four callers (two event streams, two
// plain) that never read their 8 MiB answers lose their connections once a write of the answer
// has waited WriteTimeout, so their slots (and the answers' memory) come back and a new caller
// gets through instead of 503 "connections".
func TestLocalInboxCutsClientsThatStopReading(t *testing.T) {
	big := strings.Repeat("x", slowReaderAnswer)
	a := chattest.NewAnswerer(func(_ context.Context, key, text string) (supervisor.Reply, error) {
		if text == "big" {
			return supervisor.Reply{ChatKey: key, Text: big, Status: "completed", TurnID: "t"}, nil
		}
		return chattest.EchoReply(key, text), nil
	})
	h, err := New(Config{Answerer: a, WriteTimeout: 300 * time.Millisecond})
	must(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	lim := LimitConns(ln, 4, nil)
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

	for _, accept := range []string{"text/event-stream", "text/event-stream", "application/json", "application/json"} {
		dialNonReader(t, addr, accept)
	}
	ctx := waitCtx(t)
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case <-ctx.Done():
				t.Fatalf("%s: still %d connections open, %d turns finished", what, lim.Open(), len(a.Calls()))
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	waitFor("the four turns ended", func() bool { _, _, _, done := a.Snapshot(); return done == 4 })
	waitFor("the server cut the clients that do not read", func() bool { return lim.Open() == 0 })

	resp, err := (&http.Client{Timeout: waitTimeout}).Post("http://"+addr+"/v1/chats/k/messages", "application/json", strings.NewReader(`{"text":"after"}`))
	must(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(raw), "echo: after") {
		t.Errorf("a caller after the cut: %d %s", resp.StatusCode, raw)
	}
}
