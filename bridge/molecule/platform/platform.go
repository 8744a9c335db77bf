package platform

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/chat"
	"github.com/molecule-ai/codex-warm/internal/secretset"
	"go.uber.org/zap"
)

// maxSmallBody caps responses we only inspect for errors (register, notify, a2a, ...).
const maxSmallBody = 64 << 10

// maxErrorSnippet is how much of a response body an error quotes.
const maxErrorSnippet = 256

// codeTenantOrgRequired is the code of the tenant guard's 400 for a request without
// X-Molecule-Org-Id (middleware/tenant_guard.go).
const codeTenantOrgRequired = "TENANT_ORG_HEADER_REQUIRED"

// ErrCursorGone means the platform no longer knows the since_id cursor (HTTP 410).
var ErrCursorGone = errors.New("activity cursor unknown to the platform (HTTP 410)")

// HTTPError is a non-2xx platform response. Body is a short, token-redacted excerpt.
type HTTPError struct {
	Op     string // what we tried: "register", "poll", "notify", "a2a send", ...
	Status int
	Body   string
	// Location is where a 3xx answer pointed (redacted); platform calls never follow it.
	Location string
	// Code is the "code" member of a JSON error body (e.g. TENANT_ORG_HEADER_REQUIRED), if any.
	Code string
	// RetryAfter is the answer's Retry-After, bounded (retryAfterOf); 0 when it had none.
	RetryAfter time.Duration
}

func (e *HTTPError) Error() string {
	msg := fmt.Sprintf("%s: HTTP %d", e.Op, e.Status)
	if e.Redirect() {
		loc := e.Location
		if loc == "" {
			loc = "(no Location)"
		}
		msg += " redirect to " + loc + ", not followed: platform calls stay at PLATFORM_URL's origin"
	}
	if e.Body != "" {
		msg += ": " + e.Body
	}
	return msg
}

// Redirect reports a 3xx answer.
func (e *HTTPError) Redirect() bool { return e.Status >= 300 && e.Status <= 399 }

// TenantOrgRequired reports the SaaS tenant guard's refusal of a request without
// X-Molecule-Org-Id (middleware/tenant_guard.go): MOLECULE_ORG_ID is not set. Nothing about the
// request itself is wrong, so it is never a permanent refusal of a reply.
func (e *HTTPError) TenantOrgRequired() bool {
	return e.Status == http.StatusBadRequest && e.Code == codeTenantOrgRequired
}

// RateLimited reports a 429: the platform's rate bucket is empty for now.
func (e *HTTPError) RateLimited() bool { return e.Status == http.StatusTooManyRequests }

// Unauthorized reports a 401/403: the token was rejected.
func (e *HTTPError) Unauthorized() bool {
	return e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden
}

// Client speaks the Molecule HTTP API (docs/PROTOCOL.md section 2) for one workspace. It owns no
// goroutines, and is safe for calls at once: the token, the rate gate and the secret set carry
// their own locks.
type Client struct {
	base   *url.URL
	origin string
	ws     string
	tokens *tokenSource
	gate   *rateGate
	// onLimited, when set, hears of every answer that closed the rate gate (see rateGate).
	onLimited func(op string, wait time.Duration, status int)
	org       string
	hc        *http.Client
	timeout   time.Duration
	// peerTurn is an A2A send's X-Timeout (Options.PeerTurnTimeout).
	peerTurn time.Duration
	maxRow   int
	// secrets is what the client redacts from every text it sends and every error it returns
	// (nil: nothing; the set's methods do nothing on nil).
	secrets *secretset.Set
}

// Options are what a Client needs of the inbox's configuration.
type Options struct {
	URL         string // the platform's base URL (ParseURL)
	WorkspaceID string
	Token       string // the workspace token to start with
	// TokenFile is where the platform rotates the token ("" for none): see tokenSource.
	TokenFile string
	OrgID     string // X-Molecule-Org-Id, "" to send none
	// RequestTimeout bounds every call (and every read of an activity page).
	RequestTimeout time.Duration
	// PeerTurnTimeout is an A2A send's X-Timeout (0: DefaultPeerTurnTimeout).
	PeerTurnTimeout time.Duration
	MaxRowBytes     int64 // the activity row cap (rowScanner)
	// Secrets is the daemon's secret set: every token the client takes into use goes there, and
	// every text that leaves passes it.
	Secrets *secretset.Set
	// OnLimited, when set, hears of every answer that closed the rate gate (a 429, or a bucket
	// spent), so the caller can log it once per closing.
	OnLimited func(op string, wait time.Duration, status int)
}

// New uses a copy of hc that never follows a redirect: following one would send the token to
// whatever the Location names (another port, plain http), and would turn a reply's POST into a
// body-less GET whose 2xx looks like a delivery. A 3xx comes back as an *HTTPError.
func New(o Options, hc *http.Client) (*Client, error) {
	base, err := ParseURL(o.URL)
	if err != nil {
		return nil, err
	}
	own := *hc
	own.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	hc = &own
	set := o.Secrets // nil when a test builds a client by hand: the set's methods then do nothing
	set.Add(secretset.WorkspaceToken, o.Token)
	return &Client{
		base: base,
		// Origin carries scheme and host only: a path is not valid in an Origin header.
		origin:    base.Scheme + "://" + base.Host,
		ws:        o.WorkspaceID,
		tokens:    newTokenSource(o.Token, o.TokenFile, set),
		gate:      &rateGate{tenant: o.OrgID != "", jitter: func() time.Duration { return rand.N(maxJitter) }},
		onLimited: o.OnLimited,
		org:       o.OrgID,
		hc:        hc,
		timeout:   o.RequestTimeout,
		peerTurn:  o.PeerTurnTimeout,
		maxRow:    int(o.MaxRowBytes),
		secrets:   set,
	}, nil
}

// Origin is the platform's scheme and host, for the log.
func (c *Client) Origin() string { return c.origin }

// SetLogger names the logger the token rotation logs to (the inbox's, which redacts).
func (c *Client) SetLogger(log *zap.Logger) { c.tokens.log = log }

// SaveToken stores a token register issued in the token file and uses it from now on; without a
// token file it is used for this run only, and the error says so.
func (c *Client) SaveToken(token string) error { return c.tokens.save(token) }

// Budget is the platform's rate budget as the last answer told it.
func (c *Client) Budget() Budget { return c.gate.budget() }

// Optional reports whether an optional request (a stream reconnect, a tool chip) may spend the
// budget now, and counts it (see rateGate.optional).
func (c *Client) Optional(now time.Time) bool { return c.gate.optional(now) }

// WindowLeft is how long until the rate window refills (0 when unknown).
func (c *Client) WindowLeft(now time.Time) time.Duration { return c.gate.windowLeft(now) }

// request is one platform call.
type request struct {
	op     string
	method string
	// path is joined to the base path unescaped: every id in it passed validWorkspaceID, so it
	// has nothing to escape.
	path     string
	query    url.Values
	body     any
	asSource bool // add X-Workspace-ID: calls made as the source of a message (A2A sends)
	// idempotencyKey, when set, is sent as Idempotency-Key: the same on every attempt of one
	// delivery. The platform reads no such header today (docs/molecule.md); an A2A send's
	// messageId is what it deduplicates on.
	idempotencyKey string
	// bearer, when set, is sent instead of the workspace token (wsstate.go: a token the platform
	// issued at register).
	bearer string
	// timeout bounds the call instead of RequestTimeout when set (an A2A send waits for a push
	// peer's whole turn).
	timeout time.Duration
	// header holds further headers (X-Timeout).
	header map[string]string
	// accept is the Accept header; default application/json.
	accept string
	// stream, when set, is the body instead of body: called for every attempt, it returns the
	// body and its Content-Type (a multipart upload, sendfiles.go).
	stream func() (io.Reader, string)
	// class orders the call among those the rate gate holds; admitted says the caller already
	// passed the gate for the first attempt (the wait is not the call's: its timeout starts after).
	class    Class
	admitted bool
}

// start sends req and returns the response, whatever its status, with the body unread. The
// caller closes the body. It waits while the rate gate is closed, and a 401 answered to a token
// the token file no longer holds is sent once more with the file's token.
func (c *Client) start(ctx context.Context, req request) (*http.Response, error) {
	if !req.admitted {
		if err := c.gate.wait(ctx, req.class); err != nil {
			return nil, fmt.Errorf("%s: waiting for the platform's rate limit: %w", req.op, err)
		}
	}
	resp, err := c.send(ctx, req)
	if err != nil || resp.StatusCode != http.StatusUnauthorized || !c.tokens.reload() {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxSmallBody))
	resp.Body.Close()
	if err := c.gate.wait(ctx, req.class); err != nil {
		return nil, fmt.Errorf("%s: waiting for the platform's rate limit: %w", req.op, err)
	}
	return c.send(ctx, req)
}

// send makes one attempt of req and lets the rate gate see the answer.
func (c *Client) send(ctx context.Context, req request) (*http.Response, error) {
	u := *c.base
	u.Path = c.base.Path + req.path
	u.RawPath = ""
	u.RawQuery = req.query.Encode()
	var rd io.Reader
	if req.body != nil {
		b, err := json.Marshal(req.body)
		if err != nil {
			c.gate.failed()
			return nil, fmt.Errorf("%s: encode body: %w", req.op, err)
		}
		rd = bytes.NewReader(b)
	}
	var wrote atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) { wrote.Store(i.Err == nil) },
	})
	streamType := ""
	if req.stream != nil {
		rd, streamType = req.stream()
	}
	hr, err := http.NewRequestWithContext(ctx, req.method, u.String(), rd)
	if err != nil {
		c.gate.failed()
		return nil, fmt.Errorf("%s: %w", req.op, err)
	}
	if streamType != "" {
		hr.Header.Set("Content-Type", streamType)
	}
	bearer := c.tokens.current()
	if req.bearer != "" {
		bearer = req.bearer
	}
	hr.Header.Set("Authorization", "Bearer "+bearer)
	hr.Header.Set("Origin", c.origin)
	accept := "application/json"
	if req.accept != "" {
		accept = req.accept
	}
	hr.Header.Set("Accept", accept)
	if req.body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	if c.org != "" {
		hr.Header.Set("X-Molecule-Org-Id", c.org)
	}
	if req.asSource {
		hr.Header.Set("X-Workspace-ID", c.ws)
	}
	if req.idempotencyKey != "" {
		hr.Header.Set("Idempotency-Key", req.idempotencyKey)
	}
	for k, v := range req.header {
		hr.Header.Set(k, v)
	}
	resp, err := c.hc.Do(hr)
	if err != nil {
		c.gate.failed()
		// *url.Error names the method and URL; neither carries the token, but redact anyway in
		// case a proxy error quotes headers.
		return nil, &requestError{op: req.op, msg: c.secrets.Redact(err.Error()), sent: wrote.Load()}
	}
	if wait, _ := c.gate.observe(resp, time.Now()); wait > 0 && c.onLimited != nil {
		c.onLimited(req.op, wait, resp.StatusCode)
	}
	return resp, nil
}

// do performs req within RequestTimeout and returns the body, read up to maxSmallBody bytes.
// Non-2xx statuses are returned as *HTTPError.
func (c *Client) do(ctx context.Context, req request) ([]byte, error) {
	// The wait for the rate gate is not the call's: RequestTimeout starts after it.
	if err := c.gate.wait(ctx, req.class); err != nil {
		return nil, fmt.Errorf("%s: waiting for the platform's rate limit: %w", req.op, err)
	}
	req.admitted = true
	timeout := c.timeout
	if req.timeout > 0 {
		timeout = req.timeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := c.start(ctx, req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	// The status decides, whatever happens to the body after it: a reply whose 2xx came is
	// delivered (sending it again would make a second copy). A body that breaks off is dropped.
	body, readErr := c.readSmall(req.op, resp)
	if readErr != nil {
		body = nil
	}
	return body, c.statusErr(req.op, resp, body)
}

// readSmall reads a body we only inspect, up to maxSmallBody bytes.
func (c *Client) readSmall(op string, resp *http.Response) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxSmallBody))
	if err != nil {
		return nil, fmt.Errorf("%s: read response (HTTP %d): %s", op, resp.StatusCode, c.secrets.Redact(err.Error()))
	}
	return body, nil
}

// statusErr is nil for a 2xx answer and an *HTTPError otherwise.
func (c *Client) statusErr(op string, resp *http.Response, body []byte) error {
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		return nil
	}
	he := &HTTPError{Op: op, Status: resp.StatusCode, Body: c.snippet(body), RetryAfter: retryAfterOf(resp.Header.Get("Retry-After"), time.Now())}
	var coded struct {
		Code string `json:"code"`
	}
	if json.Unmarshal(body, &coded) == nil {
		he.Code = chat.CapText(coded.Code, 64)
	}
	if loc, err := resp.Location(); err == nil {
		he.Location = c.secrets.Redact(loc.Redacted())
	}
	return he
}

// snippet is a short, redacted, valid-UTF-8 excerpt of a body for error messages.
func (c *Client) snippet(b []byte) string {
	s := c.secrets.Redact(string(bytes.TrimSpace(b)))
	return chat.CapText(s, maxErrorSnippet+64)
}

// RegisterAnswer is what register answers (registry.go Register): the delivery mode in
// effect, and a token when the workspace had no live one.
type RegisterAnswer struct {
	Status       string `json:"status"`
	DeliveryMode string `json:"delivery_mode"`
	AuthToken    string `json:"auth_token"`
	// InboundSecret is what the platform sends push workspaces as their bearer
	// (a2a_inbound_auth.go). A poll workspace never uses it, but it is the workspace's secret
	// all the same: it goes into the secret set, never out.
	InboundSecret string `json:"platform_inbound_secret"`
}

// register announces the workspace in poll mode (no inbound URL).
func (c *Client) Register(ctx context.Context, agentName string) (RegisterAnswer, error) {
	body := map[string]any{
		"id":            c.ws,
		"url":           "",
		"agent_card":    map[string]any{"name": agentName, "skills": []any{}},
		"delivery_mode": "poll",
	}
	resp, err := c.do(ctx, request{op: "register", method: http.MethodPost, path: "/registry/register", body: body})
	if err != nil {
		return RegisterAnswer{}, err
	}
	var a RegisterAnswer
	if json.Unmarshal(resp, &a) != nil {
		// An older platform answered without a body we know: the workspace is registered.
		return RegisterAnswer{}, nil
	}
	c.secrets.Add(secretset.InboundSecret, a.InboundSecret)
	a.AuthToken = strings.TrimSpace(a.AuthToken)
	if strings.ContainsAny(a.AuthToken, "\r\n") {
		a.AuthToken = ""
	}
	return a, nil
}

// HeartbeatBody is POST /registry/heartbeat.
type HeartbeatBody struct {
	WorkspaceID   string  `json:"workspace_id"`
	ErrorRate     float64 `json:"error_rate"`
	SampleError   string  `json:"sample_error"`
	ActiveTasks   int     `json:"active_tasks"`
	CurrentTask   string  `json:"current_task"`
	UptimeSeconds int64   `json:"uptime_seconds"`
	// IsBusy says a message is being answered (the platform falls back to active_tasks > 0
	// without it); RuntimeState is "wedged" while codex children crash-loop, else "" (health.go).
	IsBusy       bool   `json:"is_busy"`
	RuntimeState string `json:"runtime_state"`
}

func (c *Client) Heartbeat(ctx context.Context, hb HeartbeatBody) error {
	hb.WorkspaceID = c.ws
	hb.CurrentTask, hb.SampleError = c.secrets.Redact(hb.CurrentTask), c.secrets.Redact(hb.SampleError)
	resp, err := c.do(ctx, request{op: "heartbeat", method: http.MethodPost, path: "/registry/heartbeat", body: hb, class: ClassHeartbeat})
	if err != nil {
		return err
	}
	// The answer carries platform_inbound_secret (registry.go Heartbeat); a platform that
	// rotates it hands the new one here.
	var a struct {
		InboundSecret string `json:"platform_inbound_secret"`
	}
	if json.Unmarshal(resp, &a) == nil {
		c.secrets.Add(secretset.InboundSecret, a.InboundSecret)
	}
	return nil
}

// ack tells the platform's mailbox that rows up to seq are consumed.
func (c *Client) Ack(ctx context.Context, seq int64) error {
	_, err := c.do(ctx, request{
		op: "ack", method: http.MethodPost,
		path: "/workspaces/" + c.ws + "/activity/ack",
		body: map[string]int64{"acked_seq": seq},
	})
	return err
}

// ParseURL accepts an absolute http(s) URL without user info (credentials in the URL
// would end up in logs and errors) and drops a trailing slash.
func ParseURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("MOLECULE_API_URL (or PLATFORM_URL) is not set")
	}
	u, err := url.Parse(strings.TrimRight(raw, "/"))
	if err != nil {
		return nil, fmt.Errorf("the platform URL is not a URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("the platform URL must be http or https, got scheme %q", u.Scheme)
	}
	if u.Host == "" {
		return nil, errors.New("the platform URL has no host")
	}
	if u.User != nil {
		return nil, errors.New("the platform URL must not contain user info")
	}
	u.RawQuery, u.Fragment = "", ""
	return u, nil
}
