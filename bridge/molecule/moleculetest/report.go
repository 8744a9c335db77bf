package moleculetest

// A workspace's report about itself, as the platform takes it (enteros-core@aeec8e47,
// workspace-server/internal/handlers/activity.go:886-967 Report): POST /workspaces/{ws}/activity
// behind WorkspaceAuth (router/router.go:535). Molecule's runtime posts one agent_log row per
// completed tool call, {"activity_type":"agent_log","source_id":ws,"target_id":ws,"summary":
// "🛠 name(…)","status":"ok"|"error","method":name}, which the canvas draws as a tool chip.
//
// The row lands in the workspace's own feed with source_id = the workspace (a poll for its
// activity_type sees it; the daemon's a2a_receive polls see an agent_log row no more than the
// platform's do) and broadcasts ACTIVITY_LOGGED (activity.go:952-964 → LogActivity).

import (
	"encoding/json"
	"net/http"
	"slices"
	"time"
)

// ActivityReport is an accepted POST /workspaces/{ws}/activity, as stored: empty strings where
// the platform stores NULL.
type ActivityReport struct {
	// RowID is the row's id in the feed.
	RowID        string
	ActivityType string
	Method       string
	Summary      string
	SourceID     string
	TargetID     string
	Status       string
	ErrorDetail  string
	DurationMs   *int
	RequestBody  json.RawMessage
	ResponseBody json.RawMessage
	Header       http.Header
	At           time.Time
}

// reportTypes are the activity types Report takes (activity.go:911-917).
var reportTypes = []string{"a2a_send", "a2a_receive", "task_update", "agent_log", "skill_promotion", "memory_write", "error"}

// report serves POST /workspaces/{ws}/activity as activity.go Report does.
func (p *Platform) report(r *http.Request, body []byte) (int, any) {
	if !p.ownWorkspace(r) {
		// The workspace token is bound to its own id (wsauth_middleware.go:145-147).
		return http.StatusUnauthorized, p.errBody(r, "invalid workspace auth token")
	}
	var b struct {
		ActivityType string          `json:"activity_type"`
		Method       string          `json:"method"`
		Summary      string          `json:"summary"`
		TargetID     string          `json:"target_id"`
		SourceID     string          `json:"source_id"`
		Status       string          `json:"status"`
		ErrorDetail  string          `json:"error_detail"`
		DurationMs   *int            `json:"duration_ms"`
		RequestBody  json.RawMessage `json:"request_body"`
		ResponseBody json.RawMessage `json:"response_body"`
		Metadata     json.RawMessage `json:"metadata"`
	}
	// gin's ShouldBindJSON: a body that does not decode into the struct, or an empty
	// activity_type (binding:"required"), is 400 "invalid request body" (activity.go:889-905).
	if err := json.Unmarshal(body, &b); err != nil || b.ActivityType == "" {
		return http.StatusBadRequest, map[string]string{"error": "invalid request body"}
	}
	if !slices.Contains(reportTypes, b.ActivityType) {
		return http.StatusBadRequest, map[string]string{"error": "invalid activity_type, must be one of: a2a_send, a2a_receive, task_update, agent_log, skill_promotion, memory_write, error"}
	}
	ws := p.cfg.WorkspaceID
	if b.SourceID != "" && b.SourceID != ws {
		// activity.go:936-947: another workspace's source_id is a spoof.
		return http.StatusForbidden, map[string]string{"error": "source_id must match authenticated workspace"}
	}
	if b.Status == "" {
		b.Status = "ok"
	}
	if isNull(b.RequestBody) {
		b.RequestBody = b.Metadata
	}
	row := Row{"activity_type": b.ActivityType, "source_id": ws, "target_id": nilIfEmpty(b.TargetID),
		"method": nilIfEmpty(b.Method), "summary": nilIfEmpty(b.Summary), "status": b.Status,
		"error_detail": nilIfEmpty(b.ErrorDetail), "duration_ms": nil, "request_body": nil, "response_body": nil}
	if b.DurationMs != nil {
		row["duration_ms"] = *b.DurationMs
	}
	if !isNull(b.RequestBody) {
		row["request_body"] = b.RequestBody
	}
	if !isNull(b.ResponseBody) {
		row["response_body"] = b.ResponseBody
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	id := p.appendLocked(row)
	p.rows[len(p.rows)-1].kind = b.ActivityType
	p.reports = append(p.reports, ActivityReport{RowID: id, ActivityType: b.ActivityType, Method: b.Method,
		Summary: b.Summary, SourceID: ws, TargetID: b.TargetID, Status: b.Status, ErrorDetail: b.ErrorDetail,
		DurationMs: b.DurationMs, RequestBody: rawOrNil(row["request_body"]), ResponseBody: rawOrNil(row["response_body"]),
		Header: r.Header.Clone(), At: time.Now()})
	p.broadcastLocked(EventActivityLogged, activityPayload(row, ""))
	return http.StatusOK, map[string]string{"status": "logged"}
}

// Reports returns the accepted POST /workspaces/{ws}/activity, in order.
func (p *Platform) Reports() []ActivityReport {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.reports)
}

// AgentLogs returns the accepted reports of activity_type agent_log (the tool chips), in order.
func (p *Platform) AgentLogs() []ActivityReport {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []ActivityReport
	for _, r := range p.reports {
		if r.ActivityType == "agent_log" {
			out = append(out, r)
		}
	}
	return out
}

func isNull(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }

func rawOrNil(v any) json.RawMessage {
	raw, _ := v.(json.RawMessage)
	return raw
}

// nilIfEmpty is the platform's nilIfEmpty (a2a_proxy_helpers.go:851-856): "" is stored as NULL.
func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
