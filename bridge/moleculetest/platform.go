// Package moleculetest is a fake Molecule platform on loopback for tests, in the spirit of
// net/http/httptest: it serves the calls the bridge makes (register, heartbeat, activity, notify,
// a2a, activity/ack; PROTOCOL.md section 2), records every call, lets a test queue inbound
// activity rows and inject failures, and lets it wait for a condition without sleeping.
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
	// WorkspaceID is the workspace the bridge runs as; default DefaultWorkspaceID.
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
	// PageLimit caps rows per activity answer (0: no cap).
	PageLimit int
	// Seed seeds the random failures of SetChaos.
	Seed uint64
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
	RouteUnknown   Route = "unknown"
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
	At     time.Time
}

// Notify is an accepted POST /workspaces/{ws}/notify.
type Notify struct {
	Workspace string
	Message   string
	Header    http.Header
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
}

// storedRow is one activity row.
type storedRow struct {
	id  string
	raw []byte
	at  time.Time
}

// failure is a queued injected failure of one route.
type failure struct {
	n      int
	status int // StatusHung: never answer
}

// Platform is the fake. Create it with New or NewPlatform; Close it when done.
type Platform struct {
	cfg     Config
	srv     *httptest.Server
	closing chan struct{}
	once    sync.Once

	mu         sync.Mutex
	rows       []storedRow
	nextID     int
	calls      []Call
	notifies   []Notify
	sends      []A2ASend
	heartbeats []map[string]any
	registers  []map[string]any
	acks       []int64
	fail       map[Route][]failure
	goneNext   bool
	chaosRate  float64
	chaosCode  int
	chaosOn    map[Route]bool
	rng        *rand.Rand
	changed    chan struct{}
}

// New starts a platform on a loopback port.
func New(cfg Config) *Platform {
	if cfg.WorkspaceID == "" {
		cfg.WorkspaceID = DefaultWorkspaceID
	}
	if cfg.Token == "" {
		cfg.Token = DefaultToken
	}
	p := &Platform{
		cfg:     cfg,
		closing: make(chan struct{}),
		fail:    make(map[Route][]failure),
		rng:     rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		changed: make(chan struct{}),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /registry/register", p.serve(RouteRegister, p.register))
	mux.HandleFunc("POST /registry/heartbeat", p.serve(RouteHeartbeat, p.heartbeat))
	mux.HandleFunc("GET /workspaces/{ws}/activity", p.serve(RouteActivity, p.activity))
	mux.HandleFunc("POST /workspaces/{ws}/notify", p.serve(RouteNotify, p.notify))
	mux.HandleFunc("POST /workspaces/{ws}/a2a", p.serve(RouteA2A, p.a2a))
	mux.HandleFunc("POST /workspaces/{ws}/activity/ack", p.serve(RouteAck, p.ack))
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

// WorkspaceID is the workspace the platform serves.
func (p *Platform) WorkspaceID() string { return p.cfg.WorkspaceID }

// Token is the accepted bearer token.
func (p *Platform) Token() string { return p.cfg.Token }

// Close releases hung requests and stops the server, waiting for its handlers. Idempotent.
func (p *Platform) Close() {
	p.once.Do(func() {
		close(p.closing)
		p.srv.Close()
	})
}

// handlerFunc handles an authorized request whose body was read; it returns the status and a
// value to encode as JSON (nil: empty body).
type handlerFunc func(r *http.Request, body []byte) (int, any)

// serve wraps a route: auth check, injected failures, recording.
func (p *Platform) serve(route Route, h handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
		call := Call{Route: route, Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(),
			Header: r.Header.Clone(), Body: body, At: time.Now()}

		status, resp := 0, any(nil)
		switch inj := p.injected(route); {
		case r.Header.Get("Authorization") != "Bearer "+p.cfg.Token:
			status, resp = http.StatusUnauthorized, p.errBody(r, "invalid token")
		case inj == StatusHung:
			p.record(call, StatusHung)
			select {
			case <-r.Context().Done():
			case <-p.closing:
			}
			return
		case inj != 0:
			status, resp = inj, p.errBody(r, "injected failure")
		default:
			status, resp = h(r, body)
		}
		p.record(call, status)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		switch resp := resp.(type) {
		case nil:
		case rawJSON:
			_, _ = w.Write(resp)
		default:
			_ = json.NewEncoder(w).Encode(resp)
		}
	}
}

// errBody is an error answer, quoting the Authorization header when LeakAuthInErrors is set.
func (p *Platform) errBody(r *http.Request, msg string) map[string]string {
	if p.cfg.LeakAuthInErrors {
		msg += fmt.Sprintf(" (request had Authorization: %q)", r.Header.Get("Authorization"))
	}
	return map[string]string{"error": msg}
}

// injected pops the route's next failure: 0 none, an HTTP status, or StatusHung.
func (p *Platform) injected(route Route) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if q := p.fail[route]; len(q) > 0 {
		f := q[0]
		if q[0].n--; q[0].n <= 0 {
			p.fail[route] = q[1:]
		}
		return f.status
	}
	if p.chaosRate > 0 && p.chaosOn[route] && p.rng.Float64() < p.chaosRate {
		return p.chaosCode
	}
	return 0
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

func (p *Platform) register(_ *http.Request, body []byte) (int, any) {
	var m map[string]any
	if json.Unmarshal(body, &m) != nil || m["id"] != p.cfg.WorkspaceID || m["delivery_mode"] != "poll" {
		return http.StatusBadRequest, map[string]string{"error": "bad register body"}
	}
	p.mu.Lock()
	p.registers = append(p.registers, m)
	p.mu.Unlock()
	return http.StatusOK, map[string]string{"status": "registered"}
}

func (p *Platform) heartbeat(_ *http.Request, body []byte) (int, any) {
	var m map[string]any
	if json.Unmarshal(body, &m) != nil || m["workspace_id"] != p.cfg.WorkspaceID {
		return http.StatusBadRequest, map[string]string{"error": "bad heartbeat body"}
	}
	for _, k := range []string{"error_rate", "sample_error", "active_tasks", "current_task", "uptime_seconds"} {
		if _, ok := m[k]; !ok {
			return http.StatusBadRequest, map[string]string{"error": "heartbeat lacks " + k}
		}
	}
	p.mu.Lock()
	p.heartbeats = append(p.heartbeats, m)
	p.mu.Unlock()
	return http.StatusOK, map[string]string{"status": "ok"}
}

// activity serves GET /workspaces/{ws}/activity: since_id → rows after it, oldest first (410 for
// an unknown id); since_secs → rows of that window, newest first.
func (p *Platform) activity(r *http.Request, _ []byte) (int, any) {
	if !p.ownWorkspace(r) {
		return http.StatusNotFound, map[string]string{"error": "workspace not found"}
	}
	q := r.URL.Query()
	if q.Get("type") != "a2a_receive" {
		return http.StatusBadRequest, map[string]string{"error": "type must be a2a_receive"}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []json.RawMessage
	switch {
	case q.Has("since_id"):
		if p.goneNext {
			p.goneNext = false
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
			return http.StatusGone, map[string]string{"error": "unknown cursor"}
		}
		for _, s := range p.rows[idx+1:] {
			if p.cfg.PageLimit > 0 && len(out) == p.cfg.PageLimit {
				break
			}
			out = append(out, s.raw)
		}
	case q.Has("since_secs"):
		secs, err := strconv.Atoi(q.Get("since_secs"))
		if err != nil || secs <= 0 {
			return http.StatusBadRequest, map[string]string{"error": "bad since_secs"}
		}
		from := time.Now().Add(-time.Duration(secs) * time.Second)
		for i := len(p.rows) - 1; i >= 0; i-- {
			if p.rows[i].at.Before(from) || (p.cfg.PageLimit > 0 && len(out) == p.cfg.PageLimit) {
				break
			}
			out = append(out, p.rows[i].raw)
		}
	default:
		return http.StatusBadRequest, map[string]string{"error": "since_id or since_secs required"}
	}
	return http.StatusOK, rawPage(out)
}

// rawJSON is an answer written as is. encoding/json would validate (and so reject) a row that a
// hostile peer nested past its depth limit; the fake must be able to serve such a page.
type rawJSON []byte

// rawPage joins rows into a JSON array without re-encoding them.
func rawPage(rows []json.RawMessage) rawJSON {
	page := []byte("[")
	for i, r := range rows {
		if i > 0 {
			page = append(page, ',')
		}
		page = append(page, r...)
	}
	return append(page, ']')
}

func (p *Platform) notify(r *http.Request, body []byte) (int, any) {
	if !p.ownWorkspace(r) {
		return http.StatusNotFound, map[string]string{"error": "workspace not found"}
	}
	var m struct {
		Message *string `json:"message"`
	}
	if json.Unmarshal(body, &m) != nil || m.Message == nil {
		return http.StatusBadRequest, map[string]string{"error": "message required"}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.notifies = append(p.notifies, Notify{Workspace: r.PathValue("ws"), Message: *m.Message, Header: r.Header.Clone()})
	if p.cfg.EchoNotifies {
		p.appendLocked(NotifyEcho(*m.Message))
	}
	return http.StatusOK, map[string]string{"status": "sent"}
}

func (p *Platform) a2a(r *http.Request, body []byte) (int, any) {
	var m struct {
		JSONRPC string `json:"jsonrpc"`
		ID      string `json:"id"`
		Method  string `json:"method"`
		Params  struct {
			Message struct {
				Role      string `json:"role"`
				MessageID string `json:"messageId"`
				Parts     []struct {
					Kind string `json:"kind"`
					Text string `json:"text"`
				} `json:"parts"`
			} `json:"message"`
		} `json:"params"`
	}
	if err := json.Unmarshal(body, &m); err != nil || m.JSONRPC != "2.0" || m.ID == "" || m.Method != "message/send" ||
		m.Params.Message.MessageID == "" || len(m.Params.Message.Parts) == 0 {
		return http.StatusBadRequest, map[string]string{"error": "bad message/send body"}
	}
	if r.Header.Get("X-Workspace-ID") == "" {
		return http.StatusBadRequest, map[string]string{"error": "X-Workspace-ID required"}
	}
	s := A2ASend{Peer: r.PathValue("ws"), Header: r.Header.Clone(), RPCID: m.ID, Method: m.Method,
		Role: m.Params.Message.Role, MessageID: m.Params.Message.MessageID}
	for i, part := range m.Params.Message.Parts {
		if i > 0 {
			s.Text += "\n"
		}
		s.Text += part.Text
	}
	p.mu.Lock()
	p.sends = append(p.sends, s)
	p.mu.Unlock()
	return http.StatusOK, map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": map[string]any{"kind": "message", "role": "agent",
		"messageId": "ack-" + m.Params.Message.MessageID, "parts": []any{}}}
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
