package moleculetest

import (
	"net/http"
)

// The workspace's lifecycle as the platform keeps it (enteros-core workspace-server/internal/):
// its status moved by heartbeats (online ⇄ degraded, handlers/registry.go Heartbeat), paused and
// resumed (handlers/workspace_restart.go Pause, Resume) and deleted (handlers/workspace_crud.go:
// status 'removed' and every token of the workspace revoked), and GET /workspaces/{ws}/state
// (handlers/workspace_crud.go State).
//
// What a deleted workspace's own token gets: every route behind WorkspaceAuth (activity, notify,
// ack, state, chat-history, chat-session/new) answers 401 "invalid workspace auth token", since a
// token only validates while its workspace is not 'removed' (wsauth/tokens.go lookupTokenByHash).
// The heartbeat answers 200: with no live token left the registry lets any caller through
// (requireWorkspaceToken's bootstrap allowance) and its UPDATE skips removed rows. Register
// answers 200 and issues a new token, which every route refuses as well; from then on the
// heartbeat refuses the old token too (a live token exists again). /state answers 404
// {"deleted":true} only to a credential that still passes WorkspaceAuth (an org API token or the
// admin token): Config.OrgScopedToken.

// Workspace statuses of the fake (the platform's workspace_status values it uses).
const (
	StatusOnline   = "online"
	StatusDegraded = "degraded"
	StatusPaused   = "paused"
	StatusRemoved  = "removed"
)

// workspace is the lifecycle state; guarded by Platform.mu.
type workspace struct {
	status string // "" means StatusOnline
	// issued is the token register issued after the deletion revoked the configured one.
	issued string
}

func (w *workspace) current() string {
	if w.status == "" {
		return StatusOnline
	}
	return w.status
}

// WorkspaceStatus is the workspace's status as the platform shows it: online, degraded (a
// heartbeat with error_rate >= 0.5 or runtime_state "wedged"), paused or removed.
func (p *Platform) WorkspaceStatus() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ws.current()
}

// Pause pauses the workspace as POST /workspaces/{ws}/pause does: /state answers paused; the
// other routes keep answering (the token stays valid). It broadcasts WORKSPACE_PAUSED {name}
// (workspace_restart.go:1828-1830).
func (p *Platform) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setStatusLocked(StatusPaused)
	p.broadcastLocked(EventWorkspacePaused, map[string]any{"name": p.cfg.WorkspaceID})
}

// Resume unpauses it (POST /workspaces/{ws}/resume; the fake goes straight back to online and
// broadcasts nothing: the platform restarts the workspace, whose own events the fake does not
// model).
func (p *Platform) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setStatusLocked(StatusOnline)
}

// Delete deletes the workspace as DELETE /workspaces/{ws} does: status removed and its tokens
// revoked; see the comment at the top of this file for what each route then answers. It
// broadcasts WORKSPACE_REMOVED {cascade_deleted} (workspace_crud.go:1059-1061); a stream open
// before stays open (its auth was checked at connect).
func (p *Platform) Delete() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setStatusLocked(StatusRemoved)
	p.broadcastLocked(EventWorkspaceRemoved, map[string]any{"cascade_deleted": 0})
}

func (p *Platform) setStatusLocked(s string) {
	p.ws.status = s
	p.changedLocked()
}

// heartbeatStatusLocked moves the status as the platform's heartbeat handler does: online →
// degraded on error_rate >= 0.5 or runtime_state "wedged"; degraded → online once error_rate <
// 0.1 and runtime_state is empty. Paused and removed workspaces keep their status.
//
// Each move broadcasts as registry.go evaluateStatus does: WORKSPACE_DEGRADED {runtime_state,
// sample_error} for a wedged runtime (registry.go:3086-3098) and {error_rate, sample_error} for
// the error rate (3112-3122), both when both hold; WORKSPACE_ONLINE {} on recovery (3154-3168).
func (p *Platform) heartbeatStatusLocked(hb map[string]any) {
	rate, _ := hb["error_rate"].(float64)
	state, _ := hb["runtime_state"].(string)
	switch p.ws.current() {
	case StatusOnline:
		if state == "wedged" {
			p.ws.status = StatusDegraded
			p.broadcastLocked(EventWorkspaceDegraded, map[string]any{"runtime_state": "wedged", "sample_error": hb["sample_error"]})
		}
		if rate >= 0.5 {
			p.ws.status = StatusDegraded
			p.broadcastLocked(EventWorkspaceDegraded, map[string]any{"error_rate": rate, "sample_error": hb["sample_error"]})
		}
	case StatusDegraded:
		if rate < 0.1 && state == "" {
			p.ws.status = StatusOnline
			p.broadcastLocked(EventWorkspaceOnline, map[string]any{})
		}
	}
}

// state serves GET /workspaces/{ws}/state.
func (p *Platform) state(r *http.Request, _ []byte) (int, any) {
	if !p.ownWorkspace(r) {
		return http.StatusNotFound, map[string]any{"workspace_id": r.PathValue("ws"), "deleted": true}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.ws.current()
	if s == StatusRemoved {
		return http.StatusNotFound, map[string]any{"workspace_id": p.cfg.WorkspaceID, "status": s, "deleted": true}
	}
	return http.StatusOK, map[string]any{"workspace_id": p.cfg.WorkspaceID, "status": s, "paused": s == StatusPaused, "deleted": false}
}
