package moleculetest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type client struct {
	t     *testing.T
	p     *moleculetest.Platform
	token string
}

func (c client) do(method, path, body string) (int, []byte) {
	c.t.Helper()
	return c.doWith(method, path, body, nil)
}

// doWith is do with further headers.
func (c client) doWith(method, path, body string, header map[string]string) (int, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.p.URL()+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("X-Workspace-ID", c.p.WorkspaceID())
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func ids(t *testing.T, body []byte) []string {
	t.Helper()
	var rows []map[string]any
	if err := json.Unmarshal(body, &rows); err != nil {
		t.Fatalf("activity body %s: %v", body, err)
	}
	var out []string
	for _, r := range rows {
		out = append(out, r["id"].(string))
	}
	return out
}

func TestActivityCursorSemantics(t *testing.T) {
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	defer http.DefaultClient.CloseIdleConnections()
	c := client{t, p, p.Token()}
	got := p.Enqueue(moleculetest.CanvasMessage("a"), moleculetest.CanvasMessage("b"), moleculetest.CanvasMessage("c"))
	base := "/workspaces/" + p.WorkspaceID() + "/activity?type=a2a_receive&include=peer_info"

	st, body := c.do("GET", base+"&since_secs=600", "")
	if st != 200 || strings.Join(ids(t, body), ",") != got[2]+","+got[1]+","+got[0] {
		t.Fatalf("since_secs: %d %s, want newest first", st, body)
	}
	st, body = c.do("GET", base+"&since_id="+got[0], "")
	if st != 200 || strings.Join(ids(t, body), ",") != got[1]+","+got[2] {
		t.Fatalf("since_id: %d %s, want oldest first after the cursor", st, body)
	}
	if st, body = c.do("GET", base+"&since_id="+got[2], ""); st != 200 || string(bytes.TrimSpace(body)) != "[]" {
		t.Fatalf("since_id at the end: %d %s", st, body)
	}
	if st, _ = c.do("GET", base+"&since_id=nope", ""); st != 410 {
		t.Fatalf("unknown cursor: %d, want 410", st)
	}
	p.GoneNext()
	if st, _ = c.do("GET", base+"&since_id="+got[0], ""); st != 410 {
		t.Fatalf("GoneNext: %d, want 410", st)
	}
	if st, _ = c.do("GET", base+"&since_id="+got[0], ""); st != 200 {
		t.Fatalf("after GoneNext: %d, want 200", st)
	}
	if st, _ = c.do("GET", "/workspaces/other/activity?type=a2a_receive&since_secs=1", ""); st != 404 {
		t.Fatalf("other workspace: %d", st)
	}
}

func TestAuthAndFailureInjection(t *testing.T) {
	p := moleculetest.NewPlatform(t, moleculetest.Config{LeakAuthInErrors: true})
	defer http.DefaultClient.CloseIdleConnections()
	bad := client{t, p, "wrong"}
	if st, body := bad.do("POST", "/registry/register", `{"id":"ws-test","delivery_mode":"poll"}`); st != 401 || !strings.Contains(string(body), "Bearer wrong") {
		t.Fatalf("wrong token: %d %s", st, body)
	}
	c := client{t, p, p.Token()}
	p.FailNext(moleculetest.RouteNotify, 2, 502)
	notify := "/workspaces/" + p.WorkspaceID() + "/notify"
	for i, want := range []int{502, 502, 200} {
		if st, _ := c.do("POST", notify, `{"message":"m"}`); st != want {
			t.Fatalf("notify %d: %d, want %d", i, st, want)
		}
	}
	if n := len(p.Notifies()); n != 1 {
		t.Fatalf("accepted notifies = %d", n)
	}
	if st, _ := c.do("POST", notify, `{"nope":1}`); st != 400 {
		t.Fatalf("bad notify body: %d", st)
	}
	a2a := `{"jsonrpc":"2.0","id":"1","method":"message/send","params":{"message":{"role":"user","messageId":"m1","parts":[{"kind":"text","text":"a"},{"kind":"text","text":"b"}]}}}`
	if st, _ := c.do("POST", "/workspaces/peer-1/a2a", a2a); st != 200 {
		t.Fatalf("a2a: %d", st)
	}
	if s := p.A2ASends(); len(s) != 1 || s[0].Text != "a\nb" || s[0].Peer != "peer-1" || s[0].MessageID != "m1" {
		t.Fatalf("a2a sends = %+v", s)
	}
	if st, _ := c.do("POST", "/workspaces/"+p.WorkspaceID()+"/activity/ack", `{"acked_seq":3}`); st != 404 {
		t.Fatalf("ack without mailbox: %d", st)
	}
	if n := p.CountCalls(moleculetest.RouteNotify, 502); n != 2 {
		t.Fatalf("recorded 502s = %d", n)
	}
}

// A hung request is recorded as hung and stays unanswered until the client gives up. The client
// gives up once the platform recorded the hang, not after a fixed time: on a loaded machine a
// short timeout can expire before the request even reaches the handler.
func TestHangNextReleasedByClientCancel(t *testing.T) {
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	p.HangNext(moleculetest.RouteHeartbeat, 1)
	wctx, wcancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer wcancel()
	ctx, cancel := context.WithCancel(wctx)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", p.URL()+"/registry/heartbeat", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer "+p.Token())
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	answered := make(chan error, 1)
	go func() {
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err == nil {
			resp.Body.Close()
		}
		answered <- err
	}()
	if err := p.WaitFor(wctx, func() bool { return p.CountCalls(moleculetest.RouteHeartbeat, moleculetest.StatusHung) == 1 }); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-answered; !errors.Is(err, context.Canceled) {
		t.Fatalf("hung request ended with %v, want the client's cancel (it was answered)", err)
	}
}

func TestEchoNotifies(t *testing.T) {
	p := moleculetest.NewPlatform(t, moleculetest.Config{EchoNotifies: true})
	defer http.DefaultClient.CloseIdleConnections()
	c := client{t, p, p.Token()}
	if st, _ := c.do("POST", "/workspaces/"+p.WorkspaceID()+"/notify", `{"message":"hello"}`); st != 200 {
		t.Fatal(st)
	}
	_, body := c.do("GET", "/workspaces/"+p.WorkspaceID()+"/activity?type=a2a_receive&since_secs=60", "")
	var rows []map[string]any
	if err := json.Unmarshal(body, &rows); err != nil || len(rows) != 1 || rows[0]["method"] != "notify" || rows[0]["source_id"] != nil {
		t.Fatalf("echo rows = %s", body)
	}
}

// A generated row is served in the page as written, in both orders, and works as a cursor.
func TestEnqueueStream(t *testing.T) {
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	defer http.DefaultClient.CloseIdleConnections()
	c := client{t, p, p.Token()}
	first := p.Enqueue(moleculetest.CanvasMessage("a"))[0]
	p.EnqueueStream("big-1", moleculetest.LargeRow("big-1", 5000, true))
	p.EnqueueStream("big-2", moleculetest.LargeRow("big-2", 10, false))
	base := "/workspaces/" + p.WorkspaceID() + "/activity?type=a2a_receive"

	_, body := c.do("GET", base+"&since_secs=600", "")
	if got := strings.Join(ids(t, body), ","); got != "big-2,big-1,"+first {
		t.Fatalf("since_secs ids = %s", got)
	}
	var rows []map[string]any
	must(t, json.Unmarshal(body, &rows))
	if s := rows[1]["summary"].(string); len(s) != 5000 || strings.Trim(s, "x") != "" {
		t.Fatalf("large summary = %d bytes", len(s))
	}
	_, body = c.do("GET", base+"&since_id=big-1", "")
	if got := strings.Join(ids(t, body), ","); got != "big-2" {
		t.Fatalf("since_id=big-1 ids = %s", got)
	}
}

// GoneFor answers 410 to that many since_id polls; RedirectNext answers a redirect with Location.
func TestGoneForAndRedirectNext(t *testing.T) {
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	defer http.DefaultClient.CloseIdleConnections()
	id := p.Enqueue(moleculetest.CanvasMessage("a"))[0]
	base := p.URL() + "/workspaces/" + p.WorkspaceID() + "/activity?type=a2a_receive"
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(q string) *http.Response {
		req, err := http.NewRequest("GET", base+q, nil)
		must(t, err)
		req.Header.Set("Authorization", "Bearer "+p.Token())
		resp, err := noFollow.Do(req)
		must(t, err)
		resp.Body.Close()
		return resp
	}
	p.GoneFor(2)
	for i, want := range []int{410, 200, 410, 200} {
		q := "&since_id=" + id
		if i%2 == 1 {
			q = "&since_secs=60"
		}
		if st := get(q).StatusCode; st != want {
			t.Fatalf("poll %d: %d, want %d", i, st, want)
		}
	}
	p.RedirectNext(moleculetest.RouteActivity, 1, http.StatusFound, "http://elsewhere.invalid/x")
	if resp := get("&since_secs=60"); resp.StatusCode != 302 || resp.Header.Get("Location") != "http://elsewhere.invalid/x" {
		t.Fatalf("redirect: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if st := get("&since_secs=60").StatusCode; st != 200 {
		t.Fatalf("after the redirect: %d", st)
	}
}

// Transport reaches the platform without the network.
func TestTransport(t *testing.T) {
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	hc := &http.Client{Transport: p.Transport()}
	p.Enqueue(moleculetest.CanvasMessage("a"))
	req, err := http.NewRequest("GET", p.URL()+"/workspaces/"+p.WorkspaceID()+"/activity?type=a2a_receive&since_secs=60", nil)
	must(t, err)
	req.Header.Set("Authorization", "Bearer "+p.Token())
	resp, err := hc.Do(req)
	must(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	must(t, err)
	if resp.StatusCode != 200 || len(ids(t, body)) != 1 || p.CountCalls(moleculetest.RouteActivity, 200) != 1 {
		t.Fatalf("in-memory poll: %d %s", resp.StatusCode, body)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
