// Package moleculetest is a fake Molecule platform on loopback for tests, in the spirit of
// net/http/httptest: it serves the calls the inbox makes (register, heartbeat, activity, notify,
// a2a, activity/ack; docs/PROTOCOL.md section 2; canvas uploads in uploads.go), records every
// call, lets a test queue inbound activity rows and inject failures, and lets it wait for a
// condition without sleeping.
//
// It behaves as the platform's sources do (docs/molecule.md, "Polling, limits and tenancy"):
// the rate limiter (600 requests a minute per bucket by default, X-RateLimit-* on every answer,
// 429 with Retry-After), the SaaS tenant guard (OrgID, SetOrgID), the activity query (limit
// 100 by default and 500 at most, newest first without a cursor, since_id pages capped too,
// before_ts), token rotation (RotateToken: the old token is answered 401) and register issuing
// a token to a workspace without a live one (NoLiveToken).
//
// It serves the workspace's event stream, GET /workspaces/{ws}/events/stream (events.go;
// docs/molecule.md, "The event stream"): each write broadcasts what the platform's write
// broadcasts (a queued row ACTIVITY_LOGGED, and USER_MESSAGE for a canvas message; a delegation
// result DELEGATION_COMPLETE or _FAILED; a heartbeat WORKSPACE_HEARTBEAT and, when current_task
// changed, TASK_UPDATED; a notify AGENT_MESSAGE; a report ACTIVITY_LOGGED), best effort as
// there: a buffer of EventBuffer events per stream, drops counted, no replay. Knobs: the route
// absent (NoEventStream, SetEventStream), events dropped at random (EventDropRate), streams cut
// (EventCutEvery, CutStreams). POST /workspaces/{ws}/activity takes the workspace's reports
// about itself, such as the runtime's agent_log tool chips (report.go). Transport streams too,
// so a test under testing/synctest can hold a stream open without a socket.
package moleculetest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Defaults of Config.
const (
	DefaultWorkspaceID = "ws-test"
	DefaultToken       = "test-token-0123456789"
)

// Config configures a Platform.
type Config struct {
	// WorkspaceID is the workspace the inbox runs as; default DefaultWorkspaceID.
	WorkspaceID string
	// Token is the only bearer token accepted; default DefaultToken. Other tokens get 401.
	Token string
	// EchoNotifies appends an echo row (method "notify", no source_id) to the activity feed for
	// every accepted notify, as the real platform shows our own replies.
	EchoNotifies bool
	// AckEnabled makes POST /workspaces/{ws}/activity/ack answer 200; otherwise it answers 404
	// (a platform without mailbox).
	AckEnabled bool
	// LeakAuthInErrors makes error bodies quote the request's Authorization header, as a careless
	// proxy might: tests use it to prove the token never reaches logs.
	LeakAuthInErrors bool
	// PageLimit caps rows per activity answer below the platform's own limit (the query's
	// limit, default 100, at most 500); 0: only that.
	PageLimit int
	// RateLimit is the rate limiter's requests per RateWindow and bucket, as the real platform
	// limits every route (middleware/ratelimit.go): 0 means DefaultRateLimit (600), negative
	// turns it off. RateWindow 0 means DefaultRateWindow (a minute).
	RateLimit  int
	RateWindow time.Duration
	// Clock is the rate limiter's clock (nil: the time; inside a testing/synctest bubble, the
	// bubble's). With it a test holds the window's edge where it likes: X-RateLimit-Reset and
	// Retry-After are whole seconds, truncated, as the real limiter's are, so at a scaled-down
	// window they would always say "0".
	Clock func() time.Time
	// OrgID turns the SaaS tenant guard on (SetOrgID): every route but register and heartbeat
	// then needs X-Molecule-Org-Id equal to it.
	OrgID string
	// NoLiveToken starts the workspace without a live token: register and heartbeat pass
	// without one and the first register answers Token as auth_token, as for a new workspace.
	NoLiveToken bool
	// DeliveryMode is the effective delivery mode register answers; empty: the one asked for.
	DeliveryMode string
	// Seed seeds the random failures of SetChaos.
	Seed uint64
	// OrgScopedToken makes Token pass the auth check of GET /state after Delete, as an org API
	// token does: /state then answers 404 {"deleted":true} (workspace.go).
	OrgScopedToken bool
	// NoEventStream makes GET /workspaces/{ws}/events/stream answer 404, as a platform without
	// the route does (SetEventStream switches it at run time).
	NoEventStream bool
	// EventDropRate is the fraction of events a stream should get that are dropped at random,
	// by the source Seed seeds (SetEventDropRate).
	EventDropRate float64
	// EventCutEvery makes the platform end each stream that long after it connected, as an
	// edge that cuts long requests does; 0: never (SetEventCutEvery).
	EventCutEvery time.Duration
}

// Route names one platform endpoint, for failure injection and call filtering.
type Route string

// Routes of the fake platform.
const (
	RouteRegister  Route = "register"
	RouteHeartbeat Route = "heartbeat"
	RouteActivity  Route = "activity"
	RouteNotify    Route = "notify"
	RouteA2A       Route = "a2a"
	RouteAck       Route = "ack"
	RouteState     Route = "state"
	// RouteChatHistory and RouteChatSession are GET chat-history and POST chat-session/new.
	RouteChatHistory Route = "chat-history"
	RouteChatSession Route = "chat-session"
	// RouteAgentLog is POST /workspaces/{ws}/activity, a row the workspace reports about itself
	// (the runtime's tool chips are agent_log rows; report.go).
	RouteAgentLog Route = "agent-log"
	RouteUnknown  Route = "unknown"
)

// StatusHung is the Status recorded for a call the platform never answered (HangNext, SetChaos).
const StatusHung = -1

// Call is one recorded request.
type Call struct {
	Route  Route
	Method string
	Path   string
	Query  url.Values
	Header http.Header
	Body   []byte
	// Status is the status answered, or StatusHung.
	Status int
	// Answer is the answer's headers (X-RateLimit-*, Retry-After, ...).
	Answer http.Header
	At     time.Time
}

// Notify is an accepted POST /workspaces/{ws}/notify.
type Notify struct {
	Workspace string
	Message   string
	Header    http.Header
	// Attachments are the notify's attachments (files back to the chat), nil when none.
	Attachments []Attachment
}

// A2ASend is an accepted POST /workspaces/{peer}/a2a.
type A2ASend struct {
	Peer      string
	Header    http.Header
	RPCID     string
	Method    string
	Role      string
	MessageID string
	// Text joins the message's text parts with "\n".
	Text string
	// Metadata is params.message.metadata, nil when absent.
	Metadata map[string]any
	// Files are the message's file parts.
	Files []A2AFile
}

// storedRow is one activity row: raw, or generated by open each time it is served.
type storedRow struct {
	id   string
	raw  []byte
	open func() io.Reader
	at   time.Time
	// kind is the activity_type of a row the platform wrote from a workspace's own report
	// (report.go): a poll for another type does not see it. Rows a test enqueues have none and
	// are served to the daemon's a2a_receive polls whatever they hold.
	kind string
}

// failure is a queued injected failure of one route.
type failure struct {
	n        int
	status   int    // StatusHung: never answer
	location string // the Location header of a redirect
	header   http.Header
}

// Platform is the fake. Create it with New or NewPlatform; Close it when done.
type Platform struct {
	cfg  Config
	srv  *httptest.Server
	once sync.Once

	mu         sync.Mutex
	rows       []storedRow
	nextID     int
	calls      []Call
	notifies   []Notify
	sends      []A2ASend
	chatUps    []Uploaded // files the workspace uploaded with chat/uploads (chatuploads.go)
	heartbeats []map[string]any
	registers  []map[string]any
	acks       []int64
	secrets    map[string]string
	fail       map[Route][]failure
	gone       int
	chaosRate  float64
	chaosCode  int
	chaosOn    map[Route]bool
	rng        *rand.Rand
	changed    chan struct{}
	token      string // the live token (RotateToken)
	inbound    string // platform_inbound_secret (SetInboundSecret)
	live       bool   // a live token exists (NoLiveToken: not until register)
	orgID      string // the tenant guard's org; "" off
	buckets    map[string]*rateBucket
	up         uploads
	ws         workspace   // status, pause, deletion (workspace.go)
	chat       chatSession // the canvas's chat session (session.go)
	peers      peerState
	events     eventHub                   // the event stream (events.go)
	reports    []ActivityReport           // accepted POST /activity (report.go)
	holds      map[chan struct{}]struct{} // hung requests' release channels (hold)
	closed     bool
}

// New starts a platform on a loopback port.
func New(cfg Config) *Platform {
	if cfg.WorkspaceID == "" {
		cfg.WorkspaceID = DefaultWorkspaceID
	}
	if cfg.Token == "" {
		cfg.Token = DefaultToken
	}
	if cfg.RateLimit == 0 {
		cfg.RateLimit = DefaultRateLimit
	}
	if cfg.RateWindow <= 0 {
		cfg.RateWindow = DefaultRateWindow
	}
	p := &Platform{
		token:   cfg.Token,
		inbound: "inbound-secret-" + cfg.WorkspaceID,
		live:    !cfg.NoLiveToken,
		orgID:   cfg.OrgID,
		buckets: make(map[string]*rateBucket),
		cfg:     cfg,
		fail:    make(map[Route][]failure),
		rng:     rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		changed: make(chan struct{}),
		events: eventHub{off: cfg.NoEventStream, dropRate: cfg.EventDropRate, cutEvery: cfg.EventCutEvery,
			subs: make(map[*subscriber]struct{}), sent: make(map[string]int)},
		holds: make(map[chan struct{}]struct{}),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /registry/register", p.serve(RouteRegister, p.register))
	mux.HandleFunc("POST /registry/heartbeat", p.serve(RouteHeartbeat, p.heartbeat))
	mux.HandleFunc("GET /workspaces/{ws}/activity", p.serve(RouteActivity, p.activity))
	mux.HandleFunc("POST /workspaces/{ws}/notify", p.serve(RouteNotify, p.notify))
	mux.HandleFunc("POST /workspaces/{ws}/a2a", p.serve(RouteA2A, p.a2a))
	mux.HandleFunc("POST /workspaces/{ws}/activity/ack", p.serve(RouteAck, p.ack))
	mux.HandleFunc("GET /workspaces/{ws}/pending-uploads/{fid}/content", p.serve(RouteUploadContent, p.uploadContent))
	mux.HandleFunc("POST /workspaces/{ws}/pending-uploads/{fid}/ack", p.serve(RouteUploadAck, p.uploadAck))
	mux.HandleFunc("GET /uploads/limits", p.serve(RouteUploadLimits, p.uploadLimits))
	mux.HandleFunc("POST /workspaces/{ws}/chat/uploads", p.serve(RouteChatUpload, p.chatUpload))
	mux.HandleFunc("GET /workspaces/{ws}/state", p.serve(RouteState, p.state))
	mux.HandleFunc("GET /workspaces/{ws}/chat-history", p.serve(RouteChatHistory, p.chatHistory))
	mux.HandleFunc("POST /workspaces/{ws}/chat-session/new", p.serve(RouteChatSession, p.chatSessionNew))
	mux.HandleFunc("GET /workspaces/{ws}/secrets/values", p.serve(RouteSecrets, p.secretValues))
	mux.HandleFunc("GET /workspaces/{ws}/events/stream", p.serve(RouteEvents, p.eventsRoute))
	mux.HandleFunc("POST /workspaces/{ws}/activity", p.serve(RouteAgentLog, p.report))
	mux.HandleFunc("/", p.serve(RouteUnknown, func(*http.Request, []byte) (int, any) {
		return http.StatusNotFound, map[string]string{"error": "not found"}
	}))
	p.srv = httptest.NewServer(mux)
	return p
}

// NewPlatform is New with t.Cleanup(Close).
func NewPlatform(t testing.TB, cfg Config) *Platform {
	t.Helper()
	p := New(cfg)
	t.Cleanup(p.Close)
	return p
}

// URL is the platform's base URL (PLATFORM_URL).
func (p *Platform) URL() string { return p.srv.URL }

// Handler serves the platform's API. With Transport it lets a client reach the platform without
// the network, as tests under testing/synctest need (a goroutine waiting on a socket keeps the
// bubble's clock from moving).
func (p *Platform) Handler() http.Handler { return p.srv.Config.Handler }

// WorkspaceID is the workspace the platform serves.
func (p *Platform) WorkspaceID() string { return p.cfg.WorkspaceID }

// Token is the accepted bearer token (the live one after RotateToken).
func (p *Platform) Token() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.token
}

// Close releases hung requests, ends the event streams and stops the server, waiting for its
// handlers. Idempotent.
func (p *Platform) Close() {
	p.once.Do(func() {
		p.mu.Lock()
		p.releaseLocked()
		p.mu.Unlock()
		p.srv.Close()
	})
}

// handlerFunc handles an authorized request whose body was read; it returns the status and a
// value to encode as JSON (nil: empty body).
type handlerFunc func(r *http.Request, body []byte) (int, any)

// serve wraps a route in what the real platform puts before its handlers, in their order
// (router.go): the rate limiter, the tenant guard, the token check; then injected failures and
// recording.
func (p *Platform) serve(route Route, h handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
		call := Call{Route: route, Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(),
			Header: r.Header.Clone(), Body: body, At: time.Now()}

		p.mu.Lock()
		retryAfter, limited := p.rateLimitedLocked(w, r)
		guard, guardBody := p.tenantRefusalLocked(route, r)
		authorized := p.authorizedLocked(route, r)
		p.mu.Unlock()
		status, resp := 0, any(nil)
		switch {
		case limited:
			status, resp = http.StatusTooManyRequests, map[string]any{"error": "rate limit exceeded", "retry_after": retryAfter}
		case guard != 0:
			status, resp = guard, guardBody
		case !authorized && route != RouteUploadLimits: // router.go serves the limits without a token
			status, resp = http.StatusUnauthorized, p.errBody(r, "invalid workspace auth token")
		}
		if status == 0 {
			switch inj := p.injected(route); {
			case inj.status == StatusHung:
				p.record(call, StatusHung)
				p.hold(r.Context())
				return
			case inj.status != 0:
				if inj.location != "" {
					w.Header().Set("Location", inj.location)
				}
				for k, v := range inj.header {
					w.Header()[k] = v
				}
				status, resp = inj.status, p.errBody(r, "injected failure")
			default:
				status, resp = h(r, body)
			}
		}
		w.Header().Set("Content-Type", "application/json")
		if a, ok := resp.(answer); ok {
			for k, v := range a.answerHeader() {
				w.Header()[k] = v
			}
		}
		call.Answer = w.Header().Clone()
		p.record(call, status)
		w.WriteHeader(status)
		switch resp := resp.(type) {
		case nil:
		case rowPage:
			resp.writeTo(w)
		case answer:
			resp.writeTo(w, r)
		default:
			_ = json.NewEncoder(w).Encode(resp)
		}
	}
}

// answer is a handler's answer that is not JSON: it sets its own headers and writes its own body
// (a file's content, the event stream).
type answer interface {
	answerHeader() http.Header
	writeTo(w http.ResponseWriter, r *http.Request)
}

// errBody is an error answer, quoting the Authorization header when LeakAuthInErrors is set.
func (p *Platform) errBody(r *http.Request, msg string) map[string]string {
	if p.cfg.LeakAuthInErrors {
		msg += fmt.Sprintf(" (request had Authorization: %q)", r.Header.Get("Authorization"))
	}
	return map[string]string{"error": msg}
}

// injected pops the route's next failure: status 0 none, an HTTP status, or StatusHung.
func (p *Platform) injected(route Route) failure {
	p.mu.Lock()
	defer p.mu.Unlock()
	if q := p.fail[route]; len(q) > 0 {
		f := q[0]
		if q[0].n--; q[0].n <= 0 {
			p.fail[route] = q[1:]
		}
		return f
	}
	if p.chaosRate > 0 && p.chaosOn[route] && p.rng.Float64() < p.chaosRate {
		return failure{status: p.chaosCode}
	}
	return failure{}
}

// record appends a call and wakes WaitFor.
func (p *Platform) record(c Call, status int) {
	c.Status = status
	p.mu.Lock()
	p.calls = append(p.calls, c)
	p.changedLocked()
	p.mu.Unlock()
}

func (p *Platform) changedLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Platform) ownWorkspace(r *http.Request) bool { return r.PathValue("ws") == p.cfg.WorkspaceID }

// activity serves GET /workspaces/{ws}/activity as handlers/activity.go List does: limit
// (default 100, at most 500) caps every answer; since_id gives the rows after that row, oldest
// first (410 for an unknown id); without it the answer is the newest rows, newest first;
// since_secs (positive, at most 30 days) and before_ts (RFC3339, strictly older) filter both.
func (p *Platform) activity(r *http.Request, _ []byte) (int, any) {
	if !p.ownWorkspace(r) {
		return http.StatusNotFound, map[string]string{"error": "workspace not found"}
	}
	q := r.URL.Query()
	if q.Get("type") != "a2a_receive" {
		return http.StatusBadRequest, map[string]string{"error": "type must be a2a_receive"}
	}
	limit := 100
	if n, err := strconv.Atoi(q.Get("limit")); err == nil && n > 0 {
		limit = min(n, 500)
	}
	if p.cfg.PageLimit > 0 {
		limit = min(limit, p.cfg.PageLimit)
	}
	var from, before time.Time
	if v := q.Get("since_secs"); v != "" {
		secs, err := strconv.Atoi(v)
		if err != nil || secs <= 0 {
			return http.StatusBadRequest, map[string]string{"error": "since_secs must be a positive integer"}
		}
		from = time.Now().Add(-time.Duration(min(secs, 30*24*60*60)) * time.Second)
	}
	if v := q.Get("before_ts"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return http.StatusBadRequest, map[string]string{"error": "before_ts must be an RFC3339 timestamp (e.g. 2026-05-01T00:00:00Z)"}
		}
		before = t
	}
	in := func(s storedRow) bool {
		return (s.kind == "" || s.kind == q.Get("type")) &&
			(from.IsZero() || !s.at.Before(from)) && (before.IsZero() || s.at.Before(before))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var out rowPage
	if q.Has("since_id") {
		if p.gone > 0 {
			p.gone--
			return http.StatusGone, map[string]string{"error": "cursor expired"}
		}
		// The last row with the id: a row enqueued twice (a re-delivery) is a valid cursor too.
		idx := -1
		for i := len(p.rows) - 1; i >= 0; i-- {
			if p.rows[i].id == q.Get("since_id") {
				idx = i
				break
			}
		}
		if idx < 0 {
			return http.StatusGone, map[string]string{"error": "since_id cursor not found (row may have been pruned or belongs to a different workspace); omit since_id to reset"}
		}
		for _, s := range p.rows[idx+1:] {
			if len(out) == limit {
				break
			}
			if in(s) {
				out = append(out, s)
			}
		}
		return http.StatusOK, out
	}
	for i := len(p.rows) - 1; i >= 0 && len(out) < limit; i-- {
		if in(p.rows[i]) {
			out = append(out, p.rows[i])
		}
	}
	return http.StatusOK, out
}

// rowPage is an activity answer: its rows are joined into a JSON array as they are written,
// without re-encoding them (encoding/json would validate, and so reject, a row that a hostile
// peer nested past its depth limit) and without holding generated rows in memory.
type rowPage []storedRow

func (pg rowPage) writeTo(w io.Writer) {
	_, _ = io.WriteString(w, "[")
	for i, r := range pg {
		if i > 0 {
			_, _ = io.WriteString(w, ",")
		}
		if r.open != nil {
			if _, err := io.Copy(w, r.open()); err != nil {
				return
			}
			continue
		}
		if _, err := w.Write(r.raw); err != nil {
			return
		}
	}
	_, _ = io.WriteString(w, "]")
}

func (p *Platform) notify(r *http.Request, body []byte) (int, any) {
	if !p.ownWorkspace(r) {
		return http.StatusNotFound, map[string]string{"error": "workspace not found"}
	}
	var m struct {
		Message     *string      `json:"message"`
		Attachments []Attachment `json:"attachments"`
	}
	if json.Unmarshal(body, &m) != nil || m.Message == nil || *m.Message == "" {
		// gin's binding:"required" refuses an empty string too (handlers/activity.go Notify).
		return http.StatusBadRequest, map[string]string{"error": "message is required"}
	}
	for i, a := range m.Attachments {
		if a.URI == "" || a.Name == "" {
			return http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("attachment[%d]: uri and name are required", i)}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.notifies = append(p.notifies, Notify{Workspace: r.PathValue("ws"), Message: *m.Message, Header: r.Header.Clone(), Attachments: m.Attachments})
	// agent_message_writer.go:141-149 broadcasts AGENT_MESSAGE; its row (185-188) is a raw
	// INSERT, which broadcasts nothing more.
	p.broadcastLocked(EventAgentMessage, p.agentMessage(*m.Message, m.Attachments))
	if p.cfg.EchoNotifies {
		p.appendLocked(NotifyEcho(*m.Message))
	}
	return http.StatusOK, map[string]string{"status": "sent"}
}

// a2aBody is the body of an A2A message/send.
type a2aBody struct {
	JSONRPC string `json:"jsonrpc"`
	ID      string `json:"id"`
	Method  string `json:"method"`
	Params  struct {
		Message struct {
			Role      string `json:"role"`
			MessageID string `json:"messageId"`
			Parts     []struct {
				Kind string   `json:"kind"`
				Text string   `json:"text"`
				File *A2AFile `json:"file"`
			} `json:"parts"`
			Metadata map[string]any `json:"metadata"`
		} `json:"message"`
	} `json:"params"`
}

// text joins the message's text parts with "\n".
func (m a2aBody) text() string {
	texts := make([]string, 0, len(m.Params.Message.Parts))
	for _, part := range m.Params.Message.Parts {
		if part.Kind == "file" {
			continue
		}
		texts = append(texts, part.Text)
	}
	return strings.Join(texts, "\n")
}

// Reply decodes what a recorded /notify or A2A send carried (answered or not): the reply text
// (an A2A message's text parts joined with "\n") and, for an A2A send, its messageId. ok is
// false for other routes and bodies that do not decode.
func (c Call) Reply() (text, messageID string, ok bool) {
	switch c.Route {
	case RouteNotify:
		var m struct {
			Message *string `json:"message"`
		}
		if json.Unmarshal(c.Body, &m) != nil || m.Message == nil {
			return "", "", false
		}
		return *m.Message, "", true
	case RouteA2A:
		var m a2aBody
		if json.Unmarshal(c.Body, &m) != nil {
			return "", "", false
		}
		return m.text(), m.Params.Message.MessageID, true
	}
	return "", "", false
}

func (p *Platform) a2a(r *http.Request, body []byte) (int, any) {
	if len(body) > maxA2ABody {
		// a2a_proxy.go: the body is capped at maxProxyRequestBody, and a larger one fails loud.
		return http.StatusRequestEntityTooLarge, map[string]any{"error": "request body too large", "truncated": true, "max_bytes": maxA2ABody}
	}
	var m a2aBody
	if err := json.Unmarshal(body, &m); err != nil || m.JSONRPC != "2.0" || m.ID == "" || m.Method != "message/send" ||
		m.Params.Message.MessageID == "" || len(m.Params.Message.Parts) == 0 {
		return http.StatusBadRequest, map[string]string{"error": "bad message/send body"}
	}
	if r.Header.Get("X-Workspace-ID") == "" {
		return http.StatusBadRequest, map[string]string{"error": "X-Workspace-ID required"}
	}
	s := A2ASend{Peer: r.PathValue("ws"), Header: r.Header.Clone(), RPCID: m.ID, Method: m.Method,
		Role: m.Params.Message.Role, MessageID: m.Params.Message.MessageID, Text: m.text(), Metadata: m.Params.Message.Metadata}
	for _, part := range m.Params.Message.Parts {
		if part.Kind == "file" && part.File != nil {
			s.Files = append(s.Files, *part.File)
		}
	}
	p.mu.Lock()
	p.sends = append(p.sends, s)
	p.mu.Unlock()
	return p.deliverToPeer(m, s)
}

func (p *Platform) ack(r *http.Request, body []byte) (int, any) {
	if !p.cfg.AckEnabled || !p.ownWorkspace(r) {
		return http.StatusNotFound, map[string]string{"error": "not found"}
	}
	var m struct {
		AckedSeq *int64 `json:"acked_seq"`
	}
	if json.Unmarshal(body, &m) != nil || m.AckedSeq == nil {
		return http.StatusBadRequest, map[string]string{"error": "acked_seq required"}
	}
	p.mu.Lock()
	p.acks = append(p.acks, *m.AckedSeq)
	p.mu.Unlock()
	return http.StatusOK, map[string]string{"status": "ok"}
}

// WaitFor returns nil once cond() is true, checking again after every call the platform records
// and every row enqueued, or ctx's error. cond may call the platform's accessors.
func (p *Platform) WaitFor(ctx context.Context, cond func() bool) error {
	for {
		p.mu.Lock()
		ch := p.changed
		p.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("moleculetest: condition not met: %w", ctx.Err())
		case <-ch:
		}
	}
}
