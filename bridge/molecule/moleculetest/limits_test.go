package moleculetest_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

// get is a GET with the given headers; it returns the status, the headers and the body.
func get(t *testing.T, p *moleculetest.Platform, path string, h map[string]string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, p.URL()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// The rate limiter as middleware/ratelimit.go: X-RateLimit-* on every answer, a fixed window
// per bucket, 429 with Retry-After and {"error","retry_after"} once it is spent; the org header
// keys the bucket (the whole org shares it), else the token.
func TestRateLimiter(t *testing.T) {
	p := moleculetest.NewPlatform(t, moleculetest.Config{RateLimit: 3})
	defer http.DefaultClient.CloseIdleConnections()
	path := "/workspaces/" + p.WorkspaceID() + "/activity?type=a2a_receive"
	org := map[string]string{"Authorization": "Bearer " + p.Token(), "X-Molecule-Org-Id": "org-1"}
	for i := range 3 {
		st, h, _ := get(t, p, path, org)
		if st != 200 || h.Get("X-RateLimit-Limit") != "3" || h.Get("X-RateLimit-Remaining") != strconv.Itoa(2-i) || h.Get("X-RateLimit-Reset") == "" {
			t.Fatalf("call %d: %d %v", i, st, h)
		}
	}
	st, h, body := get(t, p, path, org)
	var m struct {
		Error      string `json:"error"`
		RetryAfter *int   `json:"retry_after"`
	}
	if st != 429 || h.Get("Retry-After") == "" || json.Unmarshal(body, &m) != nil || m.Error != "rate limit exceeded" || m.RetryAfter == nil {
		t.Fatalf("4th call: %d %v %s", st, h, body)
	}
	if ra, _ := strconv.Atoi(h.Get("Retry-After")); ra < 58 || ra > 60 {
		t.Errorf("Retry-After %d, want the seconds left in the minute", ra)
	}
	// Another workspace of the org shares the bucket; the token alone is another bucket.
	if st, _, _ := get(t, p, "/health", map[string]string{"X-Molecule-Org-Id": "org-1"}); st != 429 {
		t.Errorf("same org, other caller: %d, want 429", st)
	}
	if st, _, _ := get(t, p, path, map[string]string{"Authorization": "Bearer " + p.Token()}); st != 200 {
		t.Errorf("token bucket: %d, want 200", st)
	}
	p.SetRateLimit(-1, 0)
	for range 5 {
		if st, h, _ := get(t, p, path, org); st != 200 || h.Get("X-RateLimit-Limit") != "" {
			t.Fatalf("limiter off: %d %v", st, h)
		}
	}
}

// The limiter's clock holds the window's edge where a test likes: Reset and Retry-After are
// whole seconds, truncated ("0" is under a second), and the whole bucket comes back at once at
// the window's end, not a second before.
func TestRateLimiterClock(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		now = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC).Add(d)
	}
	p := moleculetest.NewPlatform(t, moleculetest.Config{RateLimit: 2, Clock: func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}})
	defer http.DefaultClient.CloseIdleConnections()
	path := "/workspaces/" + p.WorkspaceID() + "/activity?type=a2a_receive"
	auth := map[string]string{"Authorization": "Bearer " + p.Token()}
	for range 2 {
		if st, h, _ := get(t, p, path, auth); st != 200 || h.Get("X-RateLimit-Reset") != "60" {
			t.Fatalf("first window: %d, Reset %q, want 200 and 60", st, h.Get("X-RateLimit-Reset"))
		}
	}
	for _, tc := range []struct {
		at    time.Duration
		want  int
		reset string
	}{
		{58400 * time.Millisecond, 429, "1"},
		{59900 * time.Millisecond, 429, "0"},
		{60 * time.Second, 200, "60"},
	} {
		at(tc.at)
		st, h, _ := get(t, p, path, auth)
		if st != tc.want || h.Get("X-RateLimit-Reset") != tc.reset || (st == 429 && h.Get("Retry-After") != tc.reset) {
			t.Errorf("at %v: %d, Reset %q, Retry-After %q; want %d and %q", tc.at, st, h.Get("X-RateLimit-Reset"), h.Get("Retry-After"), tc.want, tc.reset)
		}
	}
}

// The tenant guard of a SaaS tenant: register and heartbeat pass without the org header, every
// other route needs it: missing is 400 TENANT_ORG_HEADER_REQUIRED, another org is 404.
func TestTenantGuard(t *testing.T) {
	p := moleculetest.NewPlatform(t, moleculetest.Config{OrgID: "org-1"})
	defer http.DefaultClient.CloseIdleConnections()
	path := "/workspaces/" + p.WorkspaceID() + "/activity?type=a2a_receive"
	auth := map[string]string{"Authorization": "Bearer " + p.Token()}
	st, _, body := get(t, p, path, auth)
	var m struct {
		Code           string `json:"code"`
		RequiredHeader string `json:"required_header"`
	}
	if st != 400 || json.Unmarshal(body, &m) != nil || m.Code != moleculetest.TenantOrgHeaderRequired || m.RequiredHeader != "X-Molecule-Org-Id" {
		t.Fatalf("without the header: %d %s", st, body)
	}
	auth["X-Molecule-Org-Id"] = "org-2"
	if st, _, body := get(t, p, path, auth); st != 404 || len(body) != 0 {
		t.Fatalf("another org: %d %q, want a bare 404", st, body)
	}
	// A wrong org id still registers and heartbeats: the canvas shows the workspace online.
	wrong := client{t, p, p.Token()}
	for _, call := range [][2]string{
		{"/registry/register", `{"id":"` + p.WorkspaceID() + `","delivery_mode":"poll","agent_card":{}}`},
		{"/registry/heartbeat", `{"workspace_id":"` + p.WorkspaceID() + `","error_rate":0,"sample_error":"","active_tasks":0,"uptime_seconds":1,"current_task":"","is_busy":false,"runtime_state":""}`},
	} {
		if st, body := wrong.doWith("POST", call[0], call[1], map[string]string{"X-Molecule-Org-Id": "org-2"}); st != 200 {
			t.Fatalf("%s with another org: %d %s", call[0], st, body)
		}
	}
	auth["X-Molecule-Org-Id"] = "org-1"
	if st, _, _ := get(t, p, path, auth); st != 200 {
		t.Fatalf("the org: %d", st)
	}
	c := client{t, p, p.Token()}
	if st, body := c.do("POST", "/registry/register", `{"id":"`+p.WorkspaceID()+`","delivery_mode":"poll","agent_card":{}}`); st != 200 {
		t.Fatalf("register without the header: %d %s", st, body)
	}
}

// The activity query as handlers/activity.go List: limit 100 by default and 500 at most, newest
// first without a cursor, since_id pages oldest first and capped, before_ts strictly older.
func TestActivityLimitsAndPaging(t *testing.T) {
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	defer http.DefaultClient.CloseIdleConnections()
	rows := make([]moleculetest.Row, 620)
	for i := range rows {
		rows[i] = moleculetest.CanvasMessage("m")
	}
	all := p.Enqueue(rows...)
	c := client{t, p, p.Token()}
	base := "/workspaces/" + p.WorkspaceID() + "/activity?type=a2a_receive"
	_, body := c.do("GET", base, "")
	got := ids(t, body)
	if len(got) != 100 || got[0] != all[619] || got[99] != all[520] {
		t.Fatalf("no cursor: %d rows from %s to %s, want the newest 100, newest first", len(got), got[0], got[len(got)-1])
	}
	_, body = c.do("GET", base+"&limit=9999&since_secs=600", "")
	if got = ids(t, body); len(got) != 500 || got[0] != all[619] {
		t.Fatalf("limit 9999: %d rows, want 500 newest first", len(got))
	}
	_, body = c.do("GET", base+"&limit=500&since_id="+all[10], "")
	if got = ids(t, body); len(got) != 500 || got[0] != all[11] || got[499] != all[510] {
		t.Fatalf("since_id: %d rows from %s, want 500 oldest first after the cursor", len(got), got[0])
	}
	var oldest struct {
		CreatedAt string `json:"created_at"`
	}
	var page []json.RawMessage
	_, body = c.do("GET", base+"&limit=500", "")
	if err := json.Unmarshal(body, &page); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(page[len(page)-1], &oldest); err != nil || oldest.CreatedAt == "" {
		t.Fatalf("row without created_at: %s", page[len(page)-1])
	}
	_, body = c.do("GET", base+"&limit=500&before_ts="+url.QueryEscape(oldest.CreatedAt), "")
	for _, id := range ids(t, body) {
		for _, newer := range all[120:] {
			if id == newer {
				// Rows stored in the same microsecond as the oldest of the page are not older.
				t.Fatalf("before_ts served %s, not older than the page's oldest row", id)
			}
		}
	}
	if st, _ := c.do("GET", base+"&before_ts=yesterday", ""); st != 400 {
		t.Fatalf("bad before_ts: %d", st)
	}
}

// A rotated token: the old one is answered 401, the new one works. A workspace without a live
// token gets one from its first register, once.
func TestTokenRotationAndIssue(t *testing.T) {
	p := moleculetest.NewPlatform(t, moleculetest.Config{NoLiveToken: true})
	defer http.DefaultClient.CloseIdleConnections()
	c := client{t, p, ""}
	reg := `{"id":"` + p.WorkspaceID() + `","delivery_mode":"poll","agent_card":{}}`
	st, body := c.do("POST", "/registry/register", reg)
	var a map[string]string
	if st != 200 || json.Unmarshal(body, &a) != nil || a["auth_token"] != p.Token() || a["delivery_mode"] != "poll" || a["status"] != "registered" {
		t.Fatalf("first register: %d %s", st, body)
	}
	if st, body = c.do("POST", "/registry/register", reg); st != 401 {
		t.Fatalf("register without the token once one is live: %d %s", st, body)
	}
	c.token = p.Token()
	if st, body = c.do("POST", "/registry/register", reg); st != 200 || strings.Contains(string(body), "auth_token") {
		t.Fatalf("second register: %d %s, want no token", st, body)
	}
	p.RotateToken("new-token-123456")
	path := "/workspaces/" + p.WorkspaceID() + "/activity?type=a2a_receive"
	if st, _ = c.do("GET", path, ""); st != 401 {
		t.Fatalf("old token after rotation: %d", st)
	}
	c.token = "new-token-123456"
	if st, _ = c.do("GET", path, ""); st != 200 {
		t.Fatalf("new token: %d", st)
	}
}
