package moleculetest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// The canvas's chat session, as the platform and its canvas keep it (enteros-core):
//   - POST /workspaces/{ws}/chat-session/new (handlers/chat_session.go) moves the workspace's
//     chat_session_started_at marker to now, broadcasts SESSION_RESET and rotates nothing else.
//   - GET /workspaces/{ws}/chat-history (handlers/chat_history.go, messagestore/postgres_store.go)
//     lists the canvas rows (a2a_receive, no source_id) created at or after the marker and before
//     before_ts, newest first, limit rows (default 100, max 1000), as messages "<row id>:user".
//   - Each canvas device sends message.contextId (canvas/src/components/tabs/chat/hooks/
//     chatContext.ts): canvas-<ws> by default, and after a New session, on every device (the
//     one that pressed it and those that got SESSION_RESET), an id of its own,
//     sess-<ws>-<uuid>. A send without one gets canvas-<ws> from the platform, and the
//     platform's own turns (first-boot greeting, restart wake) carry canvas-<ws> whatever the
//     canvas uses (handlers/a2a_proxy.go ensureCanvasSessionContextID, platformTurnContextID).

// chatSession is the canvas session state; guarded by Platform.mu.
type chatSession struct {
	marker  time.Time         // zero: never reset (NULL)
	devices map[string]string // device → the contextId it sends
	resets  int
}

// DefaultContextID is the contextId of canvas sends that carry none and of the platform's own
// turns: canvas-<ws>.
func (p *Platform) DefaultContextID() string { return "canvas-" + p.cfg.WorkspaceID }

// NewChatSession is a press of the canvas's "New session" button: the marker moves to now and
// every device mints a sess- id of its own for its next message.
func (p *Platform) NewChatSession() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.newChatSessionLocked()
}

func (p *Platform) newChatSessionLocked() time.Time {
	prev := !p.chat.marker.IsZero()
	p.chat.marker = time.Now().UTC()
	// handlers/chat_session.go:125-130 broadcasts SESSION_RESET (the button and the route alike).
	p.broadcastLocked(EventSessionReset, map[string]any{"workspace_id": p.cfg.WorkspaceID,
		"chat_session_started_at": p.chat.marker.Format(time.RFC3339Nano), "prev_marker_set": prev})
	p.chat.resets++
	for d := range p.chat.devices {
		p.chat.devices[d] = "sess-" + p.cfg.WorkspaceID + "-" + newUUID()
	}
	p.changedLocked()
	return p.chat.marker
}

// ChatSessionResets counts New sessions (the button and POST chat-session/new).
func (p *Platform) ChatSessionResets() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.chat.resets
}

// CanvasFrom is a message typed on the canvas of device: its contextId is the device's (canvas-<ws>
// until a New session, then a sess- id of the device's own).
func (p *Platform) CanvasFrom(device, text string) Row {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.chat.devices == nil {
		p.chat.devices = make(map[string]string)
	}
	id, ok := p.chat.devices[device]
	if !ok {
		id = p.DefaultContextID()
		if !p.chat.marker.IsZero() {
			id = "sess-" + p.cfg.WorkspaceID + "-" + newUUID()
		}
		p.chat.devices[device] = id
	}
	return CanvasMessage(text).WithContextID(id)
}

// DeviceContextID is the contextId device sends now ("" before its first message).
func (p *Platform) DeviceContextID(device string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.chat.devices[device]
}

// PlatformTurn is a turn the platform itself starts in the canvas chat (a restart wake): it
// carries canvas-<ws> whatever the devices use.
func (p *Platform) PlatformTurn(text string) Row {
	return CanvasMessage(text).WithContextID(p.DefaultContextID())
}

// WithContextID sets the row's params.message.contextId.
func (r Row) WithContextID(id string) Row {
	if msg := rowMessage(r); msg != nil {
		msg["contextId"] = id
	}
	return r
}

// rowMessage is the row's params.message object, nil when it has none.
func rowMessage(r Row) map[string]any {
	body, _ := r["request_body"].(map[string]any)
	params, _ := body["params"].(map[string]any)
	msg, _ := params["message"].(map[string]any)
	return msg
}

// fillContextLocked gives a canvas message/send without a contextId the default one, as the
// platform's A2A proxy does.
func (p *Platform) fillContextLocked(r Row) {
	if r["source_id"] != nil || r["method"] != "message/send" {
		return
	}
	if msg := rowMessage(r); msg != nil {
		if id, _ := msg["contextId"].(string); id == "" {
			msg["contextId"] = p.DefaultContextID()
		}
	}
}

// chatSessionNew serves POST /workspaces/{ws}/chat-session/new.
func (p *Platform) chatSessionNew(r *http.Request, _ []byte) (int, any) {
	if !p.ownWorkspace(r) {
		return http.StatusNotFound, map[string]string{"error": "workspace not found"}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.newChatSessionLocked()
	return http.StatusOK, map[string]any{"workspace_id": p.cfg.WorkspaceID, "chat_session_started_at": m.Format(time.RFC3339Nano)}
}

// chatMessage is one message of GET chat-history.
type chatMessage struct {
	ID        string `json:"id"`
	Role      string `json:"role"`
	Content   string `json:"content"`
	Timestamp string `json:"timestamp"`
}

// chatHistory serves GET /workspaces/{ws}/chat-history.
func (p *Platform) chatHistory(r *http.Request, _ []byte) (int, any) {
	if !p.ownWorkspace(r) {
		return http.StatusBadRequest, map[string]string{"error": "workspace id must be a UUID"}
	}
	q := r.URL.Query()
	limit := 100
	if n, err := strconv.Atoi(q.Get("limit")); err == nil && n > 0 {
		limit = min(n, 1000)
	}
	var before time.Time
	if v := q.Get("before_ts"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return http.StatusBadRequest, map[string]string{"error": "before_ts must be an RFC3339 timestamp (e.g. 2026-05-01T00:00:00Z)"}
		}
		before = t
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []chatMessage
	rows := 0
	for i := len(p.rows) - 1; i >= 0 && rows < limit; i-- {
		var row struct {
			ID           string          `json:"id"`
			ActivityType string          `json:"activity_type"`
			SourceID     *string         `json:"source_id"`
			Method       string          `json:"method"`
			CreatedAt    time.Time       `json:"created_at"`
			RequestBody  json.RawMessage `json:"request_body"`
			Summary      string          `json:"summary"`
		}
		if p.rows[i].raw == nil || json.Unmarshal(p.rows[i].raw, &row) != nil || row.ActivityType != "a2a_receive" || row.SourceID != nil {
			continue
		}
		at := row.CreatedAt
		if at.IsZero() {
			at = p.rows[i].at
		}
		if (!p.chat.marker.IsZero() && at.Before(p.chat.marker)) || (!before.IsZero() && !at.Before(before)) {
			continue
		}
		rows++
		role := "user"
		if row.Method == "notify" {
			role = "agent"
		}
		out = append(out, chatMessage{ID: row.ID + ":" + role, Role: role, Content: row.Summary, Timestamp: at.Format(time.RFC3339Nano)})
	}
	slices.Reverse(out) // oldest first within the page, as the platform answers
	if out == nil {
		out = []chatMessage{}
	}
	return http.StatusOK, map[string]any{"messages": out, "reached_end": rows < limit}
}

// newUUID is a random version-4 UUID.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
