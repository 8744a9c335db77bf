package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// setNoFileLimit sets pid's RLIMIT_NOFILE (soft and hard) with prlimit(2).
func setNoFileLimit(t *testing.T, pid int, n uint64) {
	t.Helper()
	lim := syscall.Rlimit{Cur: n, Max: n}
	if _, _, errno := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, uintptr(pid), uintptr(syscall.RLIMIT_NOFILE),
		uintptr(unsafe.Pointer(&lim)), 0, 0, 0); errno != 0 {
		t.Fatalf("prlimit %d: %v", pid, errno)
	}
}

// 300 clients that send their headers and then stall in the body, against a daemon limited to
// 256 file descriptors: the inbox and `supervisor status` stay up, the stalled clients are cut
// after the body timeout, and a real caller gets through. Before the connection limit and the
// body deadline, the stalled clients used up every descriptor and the control socket with them.
func TestE2ELocalInboxSurvivesStalledClients(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true, Env: []string{"CODEX_WARM_INBOX_BODY_TIMEOUT=2s"}})
	d := e.start()
	setNoFileLimit(t, d.pid, 256)
	c := newLocalClient(t, d)
	if r := c.send("alpha", "before"); r.Text != "reply #1: before" {
		t.Fatalf("before the stall: %+v", r)
	}

	var stalled []net.Conn
	for i := range 300 {
		conn, err := net.Dial("tcp", d.ready.Daemon.Listen)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "POST /v1/chats/stall%d/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"text\":", i)
		stalled = append(stalled, conn)
	}
	// Status answers while every stalled client is still connected.
	doc := d.status()
	if doc.Daemon.PID != d.pid {
		t.Fatalf("status during the stall: %+v", doc.Daemon)
	}
	// The daemon closes every stalled client: past the connection limit at once (answered 503,
	// or closed unanswered when too many are being refused at once), within it after the body timeout (408).
	var answered408, answered503, reset int
	for i, conn := range stalled {
		if err := conn.SetReadDeadline(time.Now().Add(waitTimeout)); err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(conn)
		switch s := string(b); {
		case errors.Is(err, syscall.ECONNRESET), err == nil && s == "":
			reset++
		case err != nil:
			t.Fatalf("stalled client %d was not closed by the daemon: %v", i, err)
		case strings.HasPrefix(s, "HTTP/1.1 408"):
			answered408++
		case strings.HasPrefix(s, "HTTP/1.1 503"):
			answered503++
		default:
			t.Fatalf("stalled client %d got %q", i, capString(s, 200))
		}
	}
	t.Logf("stalled clients: %d cut after the body timeout, %d refused with 503, %d closed unanswered", answered408, answered503, reset)
	if answered408 == 0 || answered408 > 128 || answered503 == 0 {
		t.Errorf("want some clients within the default limit of 128 cut by the body timeout and some refused: 408=%d 503=%d reset=%d",
			answered408, answered503, reset)
	}
	if r := c.send("alpha", "after"); r.Text != "reply #2: after" {
		t.Fatalf("after the stall: %+v", r)
	}
	if d.hasExited() {
		t.Fatal("daemon exited")
	}
	for _, req := range e.mock.Requests() {
		if strings.Contains(req.LastUserText, "stall") {
			t.Errorf("a stalled request reached the model: %q", req.LastUserText)
		}
	}
}

// A caller that gives up while its message waits behind the chat's running turn is not run
// later: the model never sees its text.
func TestE2ELocalInboxGoneCallerIsNotRun(t *testing.T) {
	t.Parallel()
	g := newGate(0)
	e := newE2E(t, e2eConfig{Local: true, Script: func(req mockmodel.Request) mockmodel.Reply {
		if req.LastUserText == "slow" && !g.hold(waitTimeout) {
			return mockmodel.Reply{Status: 500}
		}
		return mockmodel.DefaultScript(req)
	}})
	t.Cleanup(g.release)
	d := e.start()
	c := newLocalClient(t, d)
	first := make(chan string, 1)
	go func() {
		code, b, _ := c.post("k", `{"text":"slow"}`)
		first <- fmt.Sprintf("%d %s", code, b)
	}()
	d.waitRequests(1)

	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/chats/k/messages", strings.NewReader(`{"text":"never run"}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.hc.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		gone <- err
	}()
	queued := func(n int) func() bool {
		return func() bool { return d.status().Snapshot.Totals.Queued == n }
	}
	d.waitUntil("the second message queued behind the first", queued(1))
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("caller: %v, want canceled", err)
	}
	d.waitUntil("the daemon to drop the gone caller's message", queued(0))
	g.release()
	if got := <-first; !strings.HasPrefix(got, "200 ") || !strings.Contains(got, "reply #1: slow") {
		t.Fatalf("first: %s", got)
	}
	if r := c.send("k", "third"); r.Text != "reply #2: third" {
		t.Fatalf("third: %+v (the gone caller's message must not be in the history)", r)
	}
	if got := e.requestsFor("never run"); len(got) != 0 {
		t.Fatalf("the gone caller's message reached the model %d times", len(got))
	}
}
