package moleculetest_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

// What the fake answers a paused and a deleted workspace, route by route, as the platform does.
func TestWorkspaceLifecycleAnswers(t *testing.T) {
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	c := client{t: t, p: p, token: p.Token()}
	ws := "/workspaces/" + p.WorkspaceID()
	hb := `{"workspace_id":"` + p.WorkspaceID() + `","error_rate":0,"sample_error":"","active_tasks":0,"current_task":"","uptime_seconds":1}`
	reg := `{"id":"` + p.WorkspaceID() + `","delivery_mode":"poll"}`
	state := func(c client) (int, map[string]any) {
		status, b := c.do(http.MethodGet, ws+"/state", "")
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		return status, m
	}

	if status, m := state(c); status != 200 || m["paused"] != false || m["status"] != "online" {
		t.Fatalf("state of a running workspace: %d %v", status, m)
	}
	p.Pause()
	if status, m := state(c); status != 200 || m["paused"] != true || m["status"] != "paused" {
		t.Fatalf("state of a paused workspace: %d %v", status, m)
	}
	if status, _ := c.do(http.MethodGet, ws+"/activity?type=a2a_receive&since_secs=60", ""); status != 200 {
		t.Errorf("activity of a paused workspace: %d, want 200 (its token stays valid)", status)
	}
	p.Resume()

	p.Delete()
	for _, r := range [][2]string{{http.MethodGet, ws + "/state"}, {http.MethodGet, ws + "/activity?type=a2a_receive&since_secs=60"},
		{http.MethodPost, ws + "/notify"}, {http.MethodGet, ws + "/chat-history"}} {
		if status, _ := c.do(r[0], r[1], `{"message":"x"}`); status != 401 {
			t.Errorf("%s %s of a deleted workspace: %d, want 401 (its tokens are revoked)", r[0], r[1], status)
		}
	}
	if status, _ := c.do(http.MethodPost, "/registry/heartbeat", hb); status != 200 {
		t.Errorf("heartbeat of a deleted workspace with no live token: %d, want 200", status)
	}
	status, b := c.do(http.MethodPost, "/registry/register", reg)
	var ans struct {
		AuthToken string `json:"auth_token"`
	}
	if err := json.Unmarshal(b, &ans); status != 200 || err != nil || ans.AuthToken == "" {
		t.Fatalf("register of a deleted workspace: %d %s, want 200 with a new auth_token", status, b)
	}
	issued := client{t: t, p: p, token: ans.AuthToken}
	if status, _ := state(issued); status != 401 {
		t.Errorf("state with the token issued for a deleted workspace: %d, want 401", status)
	}
	if status, _ := c.do(http.MethodPost, "/registry/heartbeat", hb); status != 401 {
		t.Errorf("heartbeat with the revoked token once a live one exists: %d, want 401", status)
	}

	org := moleculetest.NewPlatform(t, moleculetest.Config{OrgScopedToken: true})
	org.Delete()
	if status, m := state(client{t: t, p: org, token: org.Token()}); status != 404 || m["deleted"] != true {
		t.Errorf("state of a deleted workspace to an org-scoped token: %d %v, want 404 deleted", status, m)
	}
}

// chat-history lists the canvas rows at or after the New-session marker and before before_ts,
// and the devices' contextIds follow the canvas.
func TestChatSessionAndHistory(t *testing.T) {
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	c := client{t: t, p: p, token: p.Token()}
	history := func(before time.Time) []string {
		q := url.Values{}
		if !before.IsZero() {
			q.Set("before_ts", before.Format(time.RFC3339Nano))
		}
		status, b := c.do(http.MethodGet, "/workspaces/"+p.WorkspaceID()+"/chat-history?"+q.Encode(), "")
		var page struct {
			Messages []struct{ ID string } `json:"messages"`
		}
		if status != 200 || json.Unmarshal(b, &page) != nil {
			t.Fatalf("chat-history: %d %s", status, b)
		}
		var ids []string
		for _, m := range page.Messages {
			ids = append(ids, m.ID)
		}
		return ids
	}
	p.Enqueue(p.CanvasFrom("A", "a1"), moleculetest.PeerMessage("peer-b", "not canvas"))
	if got := history(time.Time{}); len(got) != 1 || got[0] != "act-1:user" {
		t.Fatalf("history = %q, want the canvas row only", got)
	}
	if id := p.DeviceContextID("A"); id != p.DefaultContextID() {
		t.Errorf("device A before a New session sends %q, want %q", id, p.DefaultContextID())
	}
	status, _ := c.do(http.MethodPost, "/workspaces/"+p.WorkspaceID()+"/chat-session/new", "")
	if status != 200 || p.ChatSessionResets() != 1 {
		t.Fatalf("chat-session/new: %d, resets %d", status, p.ChatSessionResets())
	}
	if got := history(time.Time{}); len(got) != 0 {
		t.Errorf("history after the New session = %q, want none", got)
	}
	p.Enqueue(p.CanvasFrom("A", "a2"), p.CanvasFrom("B", "b2"), moleculetest.CanvasMessage("no context"))
	a, b := p.DeviceContextID("A"), p.DeviceContextID("B")
	if a == b || a == p.DefaultContextID() || b == p.DefaultContextID() {
		t.Errorf("devices after the New session send %q and %q, want two sess- ids", a, b)
	}
	if got := history(time.Time{}); len(got) != 3 {
		t.Errorf("history = %q, want the three rows after the marker", got)
	}
	if got := history(time.Now().Add(-time.Hour)); len(got) != 0 {
		t.Errorf("history before an hour ago = %q, want none", got)
	}
}
