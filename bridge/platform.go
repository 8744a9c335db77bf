package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// maxSmallBody caps responses we only inspect for errors (register, notify, a2a, ...).
const maxSmallBody = 64 << 10

// maxErrorSnippet is how much of a response body an error quotes.
const maxErrorSnippet = 256

// errCursorGone means the platform no longer knows the since_id cursor (HTTP 410).
var errCursorGone = errors.New("activity cursor unknown to the platform (HTTP 410)")

// HTTPError is a non-2xx platform response. Body is a short, token-redacted excerpt.
type HTTPError struct {
	Op     string // what we tried: "register", "poll", "notify", "a2a send", ...
	Status int
	Body   string
	// Location is where a 3xx answer pointed (redacted); platform calls never follow it.
	Location string
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

// Unauthorized reports a 401/403: the token was rejected.
func (e *HTTPError) Unauthorized() bool {
	return e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden
}

// platformClient speaks the Molecule HTTP API (PROTOCOL.md section 2). It owns no goroutines.
type platformClient struct {
	base    *url.URL
	origin  string
	ws      string
	token   string
	org     string
	hc      *http.Client
	timeout time.Duration
	maxPoll int64
	red     redactor
}

// newPlatformClient uses a copy of hc that never follows a redirect: following one would send
// the token to whatever the Location names (another port, plain http), and would turn a reply's
// POST into a body-less GET whose 2xx looks like a delivery. A 3xx comes back as an *HTTPError.
func newPlatformClient(cfg MoleculeConfig, hc *http.Client) (*platformClient, error) {
	base, err := parsePlatformURL(cfg.PlatformURL)
	if err != nil {
		return nil, err
	}
	own := *hc
	own.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	hc = &own
	return &platformClient{
		base: base,
		// Origin carries scheme and host only: a path is not valid in an Origin header.
		origin:  base.Scheme + "://" + base.Host,
		ws:      cfg.WorkspaceID,
		token:   cfg.Token,
		org:     cfg.OrgID,
		hc:      hc,
		timeout: cfg.RequestTimeout,
		maxPoll: cfg.MaxPollBytes,
		red:     redactor{secret: cfg.Token},
	}, nil
}

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
	// delivery, so the platform can drop a copy it already stored.
	idempotencyKey string
}

// do performs req and returns the status and the body read up to limit bytes. A body longer than
// limit is cut; truncated says so. Non-2xx statuses are returned as *HTTPError unless the caller
// lists them in ok.
func (c *platformClient) do(ctx context.Context, req request, limit int64) (status int, body []byte, truncated bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	u := *c.base
	u.Path = c.base.Path + req.path
	u.RawPath = ""
	u.RawQuery = req.query.Encode()
	var rd io.Reader
	if req.body != nil {
		b, err := json.Marshal(req.body)
		if err != nil {
			return 0, nil, false, fmt.Errorf("%s: encode body: %w", req.op, err)
		}
		rd = bytes.NewReader(b)
	}
	hr, err := http.NewRequestWithContext(ctx, req.method, u.String(), rd)
	if err != nil {
		return 0, nil, false, fmt.Errorf("%s: %w", req.op, err)
	}
	hr.Header.Set("Authorization", "Bearer "+c.token)
	hr.Header.Set("Origin", c.origin)
	hr.Header.Set("Accept", "application/json")
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
	resp, err := c.hc.Do(hr)
	if err != nil {
		// *url.Error names the method and URL; neither carries the token, but redact anyway in
		// case a proxy error quotes headers.
		return 0, nil, false, fmt.Errorf("%s: %s", req.op, c.red.String(err.Error()))
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if int64(len(body)) > limit {
		body, truncated = body[:limit], true
	}
	if err != nil && !truncated {
		return resp.StatusCode, nil, false, fmt.Errorf("%s: read response (HTTP %d): %s", req.op, resp.StatusCode, c.red.String(err.Error()))
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		he := &HTTPError{Op: req.op, Status: resp.StatusCode, Body: c.snippet(body)}
		if loc, err := resp.Location(); err == nil {
			he.Location = c.red.String(loc.Redacted())
		}
		return resp.StatusCode, body, truncated, he
	}
	return resp.StatusCode, body, truncated, nil
}

// snippet is a short, redacted, valid-UTF-8 excerpt of a body for error messages.
func (c *platformClient) snippet(b []byte) string {
	s := c.red.String(string(bytes.TrimSpace(b)))
	return capText(s, maxErrorSnippet+64)
}

// register announces the workspace in poll mode (no inbound URL).
func (c *platformClient) register(ctx context.Context, agentName string) error {
	body := map[string]any{
		"id":            c.ws,
		"url":           "",
		"agent_card":    map[string]any{"name": agentName, "skills": []any{}},
		"delivery_mode": "poll",
	}
	_, _, _, err := c.do(ctx, request{op: "register", method: http.MethodPost, path: "/registry/register", body: body}, maxSmallBody)
	return err
}

// heartbeatBody is POST /registry/heartbeat.
type heartbeatBody struct {
	WorkspaceID   string  `json:"workspace_id"`
	ErrorRate     float64 `json:"error_rate"`
	SampleError   string  `json:"sample_error"`
	ActiveTasks   int     `json:"active_tasks"`
	CurrentTask   string  `json:"current_task"`
	UptimeSeconds int64   `json:"uptime_seconds"`
}

func (c *platformClient) heartbeat(ctx context.Context, hb heartbeatBody) error {
	hb.WorkspaceID = c.ws
	_, _, _, err := c.do(ctx, request{op: "heartbeat", method: http.MethodPost, path: "/registry/heartbeat", body: hb}, maxSmallBody)
	return err
}

// poll fetches inbound rows after cursor (oldest first), or the last sinceSecs seconds when cursor
// is empty (the platform answers newest first; poll reverses to oldest first). A body over the cap
// yields the complete rows read so far and truncated=true. errCursorGone reports a 410.
func (c *platformClient) poll(ctx context.Context, cursor string, sinceSecs int) (rows []json.RawMessage, truncated bool, err error) {
	q := url.Values{"type": {"a2a_receive"}, "include": {"peer_info"}}
	if cursor != "" {
		q.Set("since_id", cursor)
	} else {
		q.Set("since_secs", strconv.Itoa(sinceSecs))
	}
	status, body, cut, err := c.do(ctx, request{op: "poll", method: http.MethodGet, path: "/workspaces/" + c.ws + "/activity", query: q}, c.maxPoll)
	if status == http.StatusGone {
		return nil, false, errCursorGone
	}
	if err != nil {
		return nil, false, err
	}
	rows, err = decodeRows(body, cut)
	if err != nil {
		return nil, false, fmt.Errorf("poll: %w", err)
	}
	if cursor == "" {
		for i, j := 0, len(rows)-1; i < j; i, j = i+1, j-1 {
			rows[i], rows[j] = rows[j], rows[i]
		}
	}
	return rows, cut, nil
}

// decodeRows splits a JSON array into its elements. When the body was cut at the size cap, the
// elements complete before the cut are returned so the next poll continues after them; a cut body
// without any complete element is an error (one row larger than the cap).
func decodeRows(body []byte, cut bool) ([]json.RawMessage, error) {
	if !cut {
		var rows []json.RawMessage
		if err := json.Unmarshal(body, &rows); err == nil {
			return rows, nil
		}
	}
	// The page is cut at the size cap, or encoding/json rejects it as a whole (one row nested
	// deeper than its limit, say). Splitting the array without decoding it makes such a row cost
	// only itself: it is judged poison on its own, and the rows beside it are answered. Without
	// this, one hostile row would fail every poll and stop the workspace.
	rows, partial, complete, err := splitArray(body)
	switch {
	case err != nil:
		return nil, fmt.Errorf("activity response is not a JSON array: %w", err)
	case !complete && !cut:
		return nil, errors.New("activity response is not a JSON array: it ends before the array does")
	case len(rows) == 0 && !complete && len(partial) > 0:
		// One row is larger than the cap. Its start is handed on as a row of its own: normalize
		// judges it poison and reads its id from its first members, so the cursor moves past it.
		return []json.RawMessage{partial}, nil
	case len(rows) == 0 && !complete:
		return nil, errors.New("activity response exceeds the size cap before its first row ends")
	}
	return rows, nil
}

// splitArray returns the raw elements of a top-level JSON array by tracking strings and bracket
// depth only, so no element's content or nesting can make it fail. complete is false when the
// input ends before the array does; the partial last element is then left out of rows and
// returned as partial. Elements are not validated: normalize decodes each and judges a bad one
// poison.
func splitArray(b []byte) (rows []json.RawMessage, partial json.RawMessage, complete bool, err error) {
	i := 0
	for i < len(b) && isJSONSpace(b[i]) {
		i++
	}
	if i == len(b) || b[i] != '[' {
		return nil, nil, false, errors.New("no opening bracket")
	}
	depth, start := 0, -1
	inString, escaped := false, false
	emit := func(end int) {
		if start >= 0 {
			rows = append(rows, json.RawMessage(bytes.TrimRight(b[start:end], " \t\r\n")))
		}
		start = -1
	}
	for i++; i < len(b); i++ {
		c := b[i]
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch {
		case isJSONSpace(c):
		case c == ',' && depth == 0:
			emit(i)
		case (c == ']' || c == '}') && depth == 0:
			emit(i)
			return rows, nil, true, nil
		default:
			if start < 0 {
				start = i
			}
			switch c {
			case '"':
				inString = true
			case '[', '{':
				depth++
			case ']', '}':
				depth--
			}
		}
	}
	if start >= 0 {
		partial = b[start:]
	}
	return rows, partial, false, nil
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// notify posts a reply to the canvas user of workspace ws. key is the reply's Idempotency-Key.
func (c *platformClient) notify(ctx context.Context, ws, key, text string) error {
	_, _, _, err := c.do(ctx, request{
		op: "notify", method: http.MethodPost,
		path:           "/workspaces/" + ws + "/notify",
		body:           map[string]string{"message": text},
		idempotencyKey: key,
	}, maxSmallBody)
	return err
}

// a2aSend sends a reply to a peer agent as an A2A message/send. messageID and key (the
// Idempotency-Key) stay the same across retries and runs of one reply so the platform and the
// peer can drop a duplicate; the JSON-RPC id is new per attempt. A 2xx answer whose body is a
// JSON-RPC error still means the platform took the message: the error is returned as rpcErr for
// the log, not as a delivery failure (retrying would not change it).
func (c *platformClient) a2aSend(ctx context.Context, peer, messageID, key, text string) (rpcErr string, err error) {
	body := map[string]any{
		"jsonrpc": "2.0",
		"id":      newUUID(),
		"method":  "message/send",
		"params": map[string]any{
			"message": map[string]any{
				"role":      "user",
				"messageId": messageID,
				"parts":     []any{map[string]string{"kind": "text", "text": text}},
			},
		},
	}
	_, resp, _, err := c.do(ctx, request{
		op: "a2a send", method: http.MethodPost,
		path:           "/workspaces/" + peer + "/a2a",
		body:           body,
		asSource:       true,
		idempotencyKey: key,
	}, maxSmallBody)
	if err != nil {
		return "", err
	}
	var rpc struct {
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(resp, &rpc) == nil && rpc.Error != nil {
		return c.red.String(fmt.Sprintf("JSON-RPC error %d: %s", rpc.Error.Code, capText(rpc.Error.Message, maxErrorSnippet))), nil
	}
	return "", nil
}

// ack tells the platform's mailbox that rows up to seq are consumed.
func (c *platformClient) ack(ctx context.Context, seq int64) error {
	_, _, _, err := c.do(ctx, request{
		op: "ack", method: http.MethodPost,
		path: "/workspaces/" + c.ws + "/activity/ack",
		body: map[string]int64{"acked_seq": seq},
	}, maxSmallBody)
	return err
}
