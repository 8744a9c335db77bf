package moleculetest

// The workspace's event stream, as the platform serves it (enteros-core@aeec8e47,
// workspace-server/internal/):
//   - GET /workspaces/{ws}/events/stream (router/router.go:1115-1116) is behind WorkspaceAuth,
//     which takes a workspace bearer bound to {ws} and answers 401 "invalid workspace auth
//     token" to any other (middleware/wsauth_middleware.go:145-147); the rate limiter and the
//     tenant guard come first, as for every route (router.go:72-84), so a connect costs one
//     request of the bucket.
//   - The answer: Content-Type text/event-stream, Cache-Control no-cache, Connection
//     keep-alive, X-Accel-Buffering no (handlers/sse.go:64-69), one ": ping" comment flushed at
//     once (sse.go:81-83), then each event as `data: {"type","timestamp","data"}` and a blank
//     line, flushed (sse.go:93-104); timestamp is Unix milliseconds (sse.go:18). Nothing else is
//     ever written: no keepalive, no id, no retry.
//   - Only events of that workspace (events/broadcaster.go:184-186), from this process only
//     (broadcaster.go:120-121, 149-150: no Redis relay to SSE), into a buffer of 64 per
//     subscriber; an event that finds it full is dropped (broadcaster.go:159, 188-192). No
//     replay, no Last-Event-ID.
// Which write broadcasts which event is written where the fake makes the write (rowEventsLocked
// for activity rows, heartbeat, notify, register, report, session.go, workspace.go).

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"sync"
	"time"
	"unicode/utf8"
)

// RouteEvents is GET /workspaces/{ws}/events/stream.
const RouteEvents Route = "events"

// EventBuffer is how many events a stream's subscriber holds before the platform drops the next
// one (events/broadcaster.go:159).
const EventBuffer = 64

// EventLogSize is how many of the latest events Events keeps: a long soak's heartbeats and
// messages must not grow the fake without bound.
const EventLogSize = 8192

// Event types the fake broadcasts (events/types.go).
const (
	EventActivityLogged     = "ACTIVITY_LOGGED"
	EventUserMessage        = "USER_MESSAGE"
	EventAgentMessage       = "AGENT_MESSAGE"
	EventDelegationComplete = "DELEGATION_COMPLETE"
	EventDelegationFailed   = "DELEGATION_FAILED"
	EventWorkspaceHeartbeat = "WORKSPACE_HEARTBEAT"
	EventTaskUpdated        = "TASK_UPDATED"
	EventWorkspaceOnline    = "WORKSPACE_ONLINE"
	EventWorkspaceDegraded  = "WORKSPACE_DEGRADED"
	EventWorkspacePaused    = "WORKSPACE_PAUSED"
	EventWorkspaceRemoved   = "WORKSPACE_REMOVED"
	EventSessionReset       = "SESSION_RESET"
)

// Event is one event as the stream frames it (handlers/sse.go:16-20 aguiEvent): the frame is
// `data: ` + its JSON + "\n\n".
type Event struct {
	Type string `json:"type"`
	// Timestamp is when the platform broadcast it, in Unix milliseconds.
	Timestamp int64 `json:"timestamp"`
	// Data is the event's payload, a JSON object.
	Data json.RawMessage `json:"data"`
}

// String is the event's type and payload, for test failures.
func (e Event) String() string { return e.Type + " " + string(e.Data) }

// Payload decodes Data into a map.
func (e Event) Payload() map[string]any {
	var m map[string]any
	_ = json.Unmarshal(e.Data, &m)
	return m
}

// eventHub is the stream's state; guarded by Platform.mu.
type eventHub struct {
	off      bool
	dropRate float64
	cutEvery time.Duration
	subs     map[*subscriber]struct{}
	connects int
	sent     map[string]int
	dropped  int
	log      []Event
	task     string // the workspace's current_task, for TASK_UPDATED
	minted   int    // messageIds given to messages without one
}

// subscriber is one open stream. Its channels are made by the goroutine serving the stream, so
// that in a synctest bubble waiting on them is durable.
type subscriber struct {
	p        *Platform
	ch       chan Event
	done     chan struct{} // closed to end the stream (CutStreams, Close, turning the route off)
	once     sync.Once
	cutAfter time.Duration
}

func (s *subscriber) cut() { s.once.Do(func() { close(s.done) }) }

// eventsRoute answers GET /workspaces/{ws}/events/stream: 404 when the platform has no such
// route (NoEventStream); else the stream, subscribed before anything is written, as
// sse.go:78-83 subscribes before its ping.
func (p *Platform) eventsRoute(r *http.Request, _ []byte) (int, any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.events.off {
		return http.StatusNotFound, map[string]string{"error": "not found"}
	}
	if !p.ownWorkspace(r) {
		// The workspace token is bound to its own id (wsauth_middleware.go:145-147).
		return http.StatusUnauthorized, p.errBody(r, "invalid workspace auth token")
	}
	s := &subscriber{p: p, ch: make(chan Event, EventBuffer), done: make(chan struct{}), cutAfter: p.events.cutEvery}
	p.events.subs[s] = struct{}{}
	p.events.connects++
	return http.StatusOK, s
}

func (s *subscriber) answerHeader() http.Header {
	return http.Header{
		"Content-Type":      {"text/event-stream"},
		"Cache-Control":     {"no-cache"},
		"Connection":        {"keep-alive"},
		"X-Accel-Buffering": {"no"},
	}
}

// writeTo streams until the client goes, the stream is cut or its cut timer fires.
func (s *subscriber) writeTo(w http.ResponseWriter, r *http.Request) {
	defer s.p.unsubscribe(s)
	f, ok := w.(http.Flusher)
	if !ok {
		return
	}
	if _, err := io.WriteString(w, ": ping\n\n"); err != nil {
		return
	}
	f.Flush()
	var cut <-chan time.Time
	if s.cutAfter > 0 {
		t := time.NewTimer(s.cutAfter)
		defer t.Stop()
		cut = t.C
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.done:
			return
		case <-cut:
			return
		case ev := <-s.ch:
			select {
			case <-s.done: // cut meanwhile: the select above chose at random
				return
			default:
			}
			b, err := json.Marshal(ev)
			if err != nil {
				panic(fmt.Sprintf("moleculetest: event %s: %v", ev.Type, err))
			}
			if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
				return
			}
			f.Flush()
			s.p.mu.Lock()
			s.p.events.sent[ev.Type]++
			s.p.changedLocked()
			s.p.mu.Unlock()
		}
	}
}

func (p *Platform) unsubscribe(s *subscriber) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.events.subs, s)
	p.changedLocked()
}

// broadcastLocked broadcasts an event of the workspace as events/broadcaster.go BroadcastOnly
// and RecordAndBroadcast do: stamped now, payload JSON-encoded, delivered to each open stream
// without waiting (dropped when its buffer is full), lost to a stream not open. EventDropRate
// drops a share more at random, as a lossy path would.
func (p *Platform) broadcastLocked(typ string, payload any) {
	data, err := json.Marshal(payload)
	if err != nil {
		panic(fmt.Sprintf("moleculetest: event %s: %v", typ, err))
	}
	ev := Event{Type: typ, Timestamp: time.Now().UTC().UnixMilli(), Data: data}
	if len(p.events.log) == 2*EventLogSize { // trimmed by halves, so appends stay cheap
		p.events.log = append(p.events.log[:0:0], p.events.log[EventLogSize:]...)
	}
	p.events.log = append(p.events.log, ev)
	for s := range p.events.subs {
		if p.events.dropRate > 0 && p.rng.Float64() < p.events.dropRate {
			p.events.dropped++
			continue
		}
		select {
		case s.ch <- ev:
		default:
			p.events.dropped++
		}
	}
	p.changedLocked()
}

// Broadcast broadcasts an event of any type with payload (JSON-encodable) to the workspace's
// open streams, as the platform does for events the fake does not model.
func (p *Platform) Broadcast(eventType string, payload any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.broadcastLocked(eventType, payload)
}

// SetEventStream turns the stream route on or off at run time. Off, the route answers 404 as on
// a platform without it, and the open streams end, as that platform's restart would end them.
func (p *Platform) SetEventStream(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events.off = !on
	if !on {
		p.cutLocked()
	}
}

// SetEventDropRate makes a fraction rate of the events a stream should get dropped at random
// (the seeded source of Config.Seed); 0 drops none.
func (p *Platform) SetEventDropRate(rate float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events.dropRate = rate
}

// SetEventCutEvery makes the platform end each stream that connects from now on d after it
// connected, as an edge that cuts long requests does; 0: never.
func (p *Platform) SetEventCutEvery(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events.cutEvery = d
}

// CutStreams ends every open stream now and returns how many it ended. A frame already being
// written still reaches its client.
func (p *Platform) CutStreams() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cutLocked()
}

func (p *Platform) cutLocked() int {
	for s := range p.events.subs {
		s.cut()
	}
	return len(p.events.subs)
}

// StreamsOpen is the number of streams open now.
func (p *Platform) StreamsOpen() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.events.subs)
}

// StreamConnects is the number of streams opened (connects answered 200).
func (p *Platform) StreamConnects() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.events.connects
}

// EventsSent counts, by type, the events written to streams.
func (p *Platform) EventsSent() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.events.sent)
}

// EventsDropped counts the events a stream did not get: its buffer was full, or EventDropRate
// dropped it.
func (p *Platform) EventsDropped() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.events.dropped
}

// Events returns the events the platform broadcast for the workspace, in order, whether a
// stream was open or not: all of them, or the latest EventLogSize.
func (p *Platform) Events() []Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.events.log[max(0, len(p.events.log)-EventLogSize):])
}

// hold blocks until ctx ends or the platform closes. It waits on a channel made here, by the
// waiting goroutine, and not on Platform.closing: a platform made outside a synctest bubble
// would then keep the bubble's clock still while a request of the bubble hangs.
func (p *Platform) hold(ctx context.Context) {
	release := make(chan struct{})
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.holds[release] = struct{}{}
	p.mu.Unlock()
	select {
	case <-ctx.Done():
	case <-release:
	}
	p.mu.Lock()
	delete(p.holds, release)
	p.mu.Unlock()
}

// releaseLocked ends every hold and stream, for Close.
func (p *Platform) releaseLocked() {
	p.closed = true
	for ch := range p.holds {
		close(ch)
	}
	clear(p.holds)
	p.cutLocked()
}

// rowEventsLocked broadcasts what the platform broadcasts when the row lands in the feed, by the
// path that writes such a row:
//   - delegate_result: DELEGATION_COMPLETE or DELEGATION_FAILED only; the row itself is a raw
//     INSERT (delegation.go:209-214) and the event is broadcast by its caller just before it
//     (delegation.go:906-913, 958-963 with target_id; 1163-1174, 1201-1206 without, when the
//     callee is unknown).
//   - our own notify's row (method notify): AGENT_MESSAGE; the row is a raw INSERT
//     (agent_message_writer.go:141-149, 185-188).
//   - a message through the A2A proxy (canvas or peer to a poll-mode workspace): the ingest
//     write's ACTIVITY_LOGGED, then USER_MESSAGE for a canvas sender, then the queued write's
//     ACTIVITY_LOGGED, both writes upserting the one row on its messageId
//     (a2a_proxy.go:838-840, 869-872; a2a_proxy_helpers.go:1346-1356, 1464-1502, 1571-1606).
//   - anything else (chat_upload_receive, rows of other types): one ACTIVITY_LOGGED of the row's
//     fields (activity.go:1170-1222; chat_files.go:777-798, 817-819).
func (p *Platform) rowEventsLocked(r Row) {
	method, _ := r["method"].(string)
	typ, _ := r["activity_type"].(string)
	switch {
	case method == "delegate_result":
		p.delegationEventLocked(r)
	case method == "notify" && r["source_id"] == nil:
		summary, _ := r["summary"].(string)
		p.broadcastLocked(EventAgentMessage, p.agentMessage(summary, nil))
	case typ == "a2a_receive" && method != "" && method != "chat_upload_receive":
		p.proxiedEventsLocked(r, method)
	default:
		p.broadcastLocked(EventActivityLogged, activityPayload(r, ""))
	}
}

// activityPayload is the ACTIVITY_LOGGED payload of a row (activity.go:1172-1215): the row's
// activity_type, method, summary, status, source_id, target_id and duration_ms (null when
// absent), request_body and response_body when set, error_detail when not empty (capped and
// redacted), message_id when not empty. Never the row's id, created_at or seq.
func activityPayload(r Row, messageID string) map[string]any {
	m := map[string]any{
		"activity_type": r["activity_type"],
		"method":        r["method"],
		"summary":       r["summary"],
		"status":        r["status"],
		"source_id":     r["source_id"],
		"target_id":     r["target_id"],
		"duration_ms":   r["duration_ms"],
	}
	if m["status"] == nil {
		m["status"] = "ok" // every writer sets one; "ok" is what the message paths set
	}
	for _, k := range []string{"tool_trace", "request_body", "response_body"} {
		if v, ok := r[k]; ok && v != nil {
			m[k] = v
		}
	}
	if d, _ := r["error_detail"].(string); d != "" {
		m["error_detail"] = sanitizeErrorDetail(d)
	}
	if messageID != "" {
		m["message_id"] = messageID
	}
	return m
}

// proxiedEventsLocked broadcasts the events of a message the A2A proxy stored for this
// poll-mode workspace. The proxy gives a message without a messageId one
// (a2a_proxy.go:1439-1443); the fake gives the events one but leaves the row as the test wrote
// it.
func (p *Platform) proxiedEventsLocked(r Row, method string) {
	ws := p.cfg.WorkspaceID
	msgID := ""
	if msg := rowMessage(r); msg != nil {
		msgID, _ = msg["messageId"].(string)
		if msgID == "" {
			p.events.minted++
			msgID = fmt.Sprintf("minted-%d", p.events.minted)
		}
	}
	base := Row{"activity_type": "a2a_receive", "method": method, "status": "ok", "source_id": r["source_id"],
		"target_id": ws, "request_body": r["request_body"]}
	if method == "message/send" && msgID != "" {
		// persistUserMessageAtIngest (a2a_proxy_helpers.go:1447, 1464-1482).
		ingest := maps.Clone(base)
		ingest["summary"] = method + " → " + ws + " (ingest)"
		p.broadcastLocked(EventActivityLogged, activityPayload(ingest, msgID))
		if r["source_id"] == nil { // isChatHistoryVisible: a canvas sender (a2a_proxy_helpers.go:1500-1502)
			if um := userMessage(ws, msgID, r); um != nil {
				p.broadcastLocked(EventUserMessage, um)
			}
		}
	}
	// logA2AReceiveQueued (a2a_proxy_helpers.go:1345-1356).
	queued := maps.Clone(base)
	queued["summary"] = method + " → " + ws + " (queued for poll)"
	p.broadcastLocked(EventActivityLogged, activityPayload(queued, msgID))
}

// userMessage is USER_MESSAGE's payload (a2a_proxy_helpers.go:1571-1606): message_id, the first
// text part as content, workspace_id, and the file parts as attachments {name, mimeType, uri,
// size}; nil when the message has neither text nor files. Every file part is kept, with "file"
// for a missing name: the source's check for a uri compares an interface to "" and so always
// passes (a2a_proxy_helpers.go:1673).
func userMessage(ws, msgID string, r Row) map[string]any {
	msg := rowMessage(r)
	parts, _ := msg["parts"].([]any)
	text := ""
	var atts []map[string]any
	for _, raw := range parts {
		part, _ := raw.(map[string]any)
		kind, _ := part["kind"].(string)
		if kind == "" {
			kind, _ = part["type"].(string)
		}
		switch kind {
		case "text":
			if t, _ := part["text"].(string); text == "" && t != "" {
				text = t
			}
		case "file":
			att := map[string]any{}
			if f, _ := part["file"].(map[string]any); f != nil {
				for _, k := range []string{"name", "mimeType", "uri"} {
					if v, _ := f[k].(string); v != "" {
						att[k] = v
					}
				}
				switch n := f["size"].(type) {
				case int:
					att["size"] = n
				case int64:
					att["size"] = n
				case float64:
					att["size"] = int64(n)
				}
			}
			if _, ok := att["name"]; !ok {
				att["name"] = "file"
			}
			atts = append(atts, att)
		}
	}
	if text == "" && len(atts) == 0 {
		return nil
	}
	m := map[string]any{"message_id": msgID, "content": text, "workspace_id": ws}
	if len(atts) > 0 {
		m["attachments"] = atts
	}
	return m
}

// delegationEventLocked broadcasts a delegation result's event (delegation.go:906-910, 958-960,
// 1163-1166, 1201-1204): COMPLETE {delegation_id, target_id, response_preview (200 bytes at
// most)} or FAILED {delegation_id, target_id, error}; target_id only when the callee is known.
func (p *Platform) delegationEventLocked(r Row) {
	req, _ := r["request_body"].(map[string]any)
	resp, _ := r["response_body"].(map[string]any)
	id, _ := req["delegation_id"].(string)
	if id == "" {
		id, _ = resp["delegation_id"].(string)
	}
	m := map[string]any{"delegation_id": id}
	if callee, _ := r["target_id"].(string); callee != "" {
		m["target_id"] = callee
	}
	if r["status"] == "error" || r["status"] == "failed" {
		m["error"], _ = r["error_detail"].(string)
		p.broadcastLocked(EventDelegationFailed, m)
		return
	}
	text, _ := resp["text"].(string)
	m["response_preview"] = truncateBytes(text, 200)
	p.broadcastLocked(EventDelegationComplete, m)
}

// agentMessage is AGENT_MESSAGE's payload (agent_message_writer.go:141-149): the message, the
// workspace's id and name (the fake's workspaces have no other name than their id), the
// attachments when there are some.
func (p *Platform) agentMessage(text string, atts []Attachment) map[string]any {
	m := map[string]any{"message": text, "workspace_id": p.cfg.WorkspaceID, "name": p.cfg.WorkspaceID}
	if len(atts) > 0 {
		m["attachments"] = atts
	}
	return m
}

// truncateBytes is textutil.TruncateBytes: at most n bytes, cut at a rune boundary, ending in
// "…" when cut.
func truncateBytes(s string, n int) string {
	const ellipsis = "…"
	if len(s) <= n {
		return s
	}
	cut := n - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

var (
	errorDetailSecret = regexp.MustCompile(`(?i)((?:bearer|token|api[_-]?key|sk-proj-|sk-)[ :=]*)[A-Za-z0-9_/.-]{20,}`)
	errorDetailJWT    = regexp.MustCompile(`eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}`)
)

// sanitizeErrorDetail is activity.go:49-61 sanitizeErrorDetailForBroadcast: capped at 4096 bytes,
// token-shaped strings redacted.
func sanitizeErrorDetail(s string) string {
	if len(s) > 4096 {
		s = s[:4096] + "…[truncated]"
	}
	s = errorDetailSecret.ReplaceAllString(s, "${1}[REDACTED]")
	return errorDetailJWT.ReplaceAllString(s, "[REDACTED]")
}
