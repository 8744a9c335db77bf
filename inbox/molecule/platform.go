package molecule

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/molecule-ai/codex-warm/inbox/chat"
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

// Unauthorized reports a 401/403: the token was rejected.
func (e *HTTPError) Unauthorized() bool {
	return e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden
}

// platformClient speaks the Molecule HTTP API (docs/PROTOCOL.md section 2). It owns no goroutines.
type platformClient struct {
	base    *url.URL
	origin  string
	ws      string
	token   string
	org     string
	hc      *http.Client
	timeout time.Duration
	// peerTurn is an A2A send's X-Timeout (Config.PeerTurnTimeout).
	peerTurn time.Duration
	maxRow   int
	red      redactor
}

// newPlatformClient uses a copy of hc that never follows a redirect: following one would send
// the token to whatever the Location names (another port, plain http), and would turn a reply's
// POST into a body-less GET whose 2xx looks like a delivery. A 3xx comes back as an *HTTPError.
func newPlatformClient(cfg Config, hc *http.Client) (*platformClient, error) {
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
		origin:   base.Scheme + "://" + base.Host,
		ws:       cfg.WorkspaceID,
		token:    cfg.Token,
		org:      cfg.OrgID,
		hc:       hc,
		timeout:  cfg.RequestTimeout,
		peerTurn: cfg.PeerTurnTimeout,
		maxRow:   int(cfg.MaxRowBytes),
		red:      redactor{secret: cfg.Token},
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
	// delivery. The platform reads no such header today (docs/molecule.md); an A2A send's
	// messageId is what it deduplicates on.
	idempotencyKey string
	// timeout bounds the call instead of RequestTimeout when set (an A2A send waits for a push
	// peer's whole turn).
	timeout time.Duration
	// header holds further headers (X-Timeout).
	header map[string]string
}

// start sends req and returns the response, whatever its status, with the body unread. The
// caller closes the body.
func (c *platformClient) start(ctx context.Context, req request) (*http.Response, error) {
	u := *c.base
	u.Path = c.base.Path + req.path
	u.RawPath = ""
	u.RawQuery = req.query.Encode()
	var rd io.Reader
	if req.body != nil {
		b, err := json.Marshal(req.body)
		if err != nil {
			return nil, fmt.Errorf("%s: encode body: %w", req.op, err)
		}
		rd = bytes.NewReader(b)
	}
	var wrote atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) { wrote.Store(i.Err == nil) },
	})
	hr, err := http.NewRequestWithContext(ctx, req.method, u.String(), rd)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", req.op, err)
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
	for k, v := range req.header {
		hr.Header.Set(k, v)
	}
	resp, err := c.hc.Do(hr)
	if err != nil {
		// *url.Error names the method and URL; neither carries the token, but redact anyway in
		// case a proxy error quotes headers.
		return nil, &requestError{op: req.op, msg: c.red.String(err.Error()), sent: wrote.Load()}
	}
	return resp, nil
}

// do performs req within RequestTimeout and returns the body, read up to maxSmallBody bytes.
// Non-2xx statuses are returned as *HTTPError.
func (c *platformClient) do(ctx context.Context, req request) ([]byte, error) {
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
func (c *platformClient) readSmall(op string, resp *http.Response) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxSmallBody))
	if err != nil {
		return nil, fmt.Errorf("%s: read response (HTTP %d): %s", op, resp.StatusCode, c.red.String(err.Error()))
	}
	return body, nil
}

// statusErr is nil for a 2xx answer and an *HTTPError otherwise.
func (c *platformClient) statusErr(op string, resp *http.Response, body []byte) error {
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		return nil
	}
	he := &HTTPError{Op: op, Status: resp.StatusCode, Body: c.snippet(body), RetryAfter: retryAfterOf(resp.Header.Get("Retry-After"), time.Now())}
	if loc, err := resp.Location(); err == nil {
		he.Location = c.red.String(loc.Redacted())
	}
	return he
}

// snippet is a short, redacted, valid-UTF-8 excerpt of a body for error messages.
func (c *platformClient) snippet(b []byte) string {
	s := c.red.String(string(bytes.TrimSpace(b)))
	return chat.CapText(s, maxErrorSnippet+64)
}

// register announces the workspace in poll mode (no inbound URL).
func (c *platformClient) register(ctx context.Context, agentName string) error {
	body := map[string]any{
		"id":            c.ws,
		"url":           "",
		"agent_card":    map[string]any{"name": agentName, "skills": []any{}},
		"delivery_mode": "poll",
	}
	_, err := c.do(ctx, request{op: "register", method: http.MethodPost, path: "/registry/register", body: body})
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
	hb.CurrentTask, hb.SampleError = c.red.String(hb.CurrentTask), c.red.String(hb.SampleError)
	_, err := c.do(ctx, request{op: "heartbeat", method: http.MethodPost, path: "/registry/heartbeat", body: hb})
	return err
}

// pageLimits bound what one poll keeps of an activity page.
type pageLimits struct {
	rows  int   // rows: the room left in the unacked window
	bytes int64 // bytes of row text held (MaxPollBytes)
}

// pollPage is what a poll kept, oldest first.
type pollPage struct {
	rows []scannedRow
	// more says a limit left rows of the page for later: the next poll, from the last row kept,
	// should come at once.
	more bool
}

// poll fetches inbound rows after cursor (oldest first), or the last sinceSecs seconds when
// cursor is empty (the platform answers newest first). The page is read as a stream, one row at
// a time, and what is kept stays within lim and the row cap whatever the page's size; see
// keepOldestFirst and keepOldestOfWindow. With a cursor, rows read before a failure are returned
// with the error: they are complete and follow the cursor. errCursorGone reports a 410.
//
// RequestTimeout bounds the wait for the answer and for each read of the page, not the whole
// page: a large page that keeps coming is not cut off, one that stalls is.
func (c *platformClient) poll(ctx context.Context, cursor string, sinceSecs int, lim pageLimits) (pollPage, error) {
	q := url.Values{"type": {"a2a_receive"}, "include": {"peer_info"}}
	if cursor != "" {
		q.Set("since_id", cursor)
	} else {
		q.Set("since_secs", strconv.Itoa(sinceSecs))
	}
	parent := ctx
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	idleErr := fmt.Errorf("no data from the platform for %s (RequestTimeout)", c.timeout)
	idle := time.AfterFunc(c.timeout, func() { cancel(idleErr) })
	defer idle.Stop()
	// failed names the idle deadline when it is why err happened; err already names the poll.
	failed := func(err error) error {
		if parent.Err() == nil && errors.Is(context.Cause(ctx), idleErr) {
			return fmt.Errorf("poll: %w", idleErr)
		}
		return err
	}

	resp, err := c.start(ctx, request{op: "poll", method: http.MethodGet, path: "/workspaces/" + c.ws + "/activity", query: q})
	if err != nil {
		return pollPage{}, failed(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		body, err := c.readSmall("poll", resp)
		if err != nil {
			return pollPage{}, failed(err)
		}
		if resp.StatusCode == http.StatusGone {
			return pollPage{}, errCursorGone
		}
		return pollPage{}, c.statusErr("poll", resp, body)
	}
	sc := newRowScanner(idleReader{r: resp.Body, idle: idle, d: c.timeout}, c.maxRow)
	var pg pollPage
	if cursor != "" {
		pg, err = keepOldestFirst(sc, lim)
	} else {
		pg, err = keepOldestOfWindow(sc, lim)
	}
	if err != nil {
		return pg, failed(fmt.Errorf("poll: %w", err))
	}
	return pg, nil
}

// idleReader pushes the idle deadline back whenever data arrives.
type idleReader struct {
	r    io.Reader
	idle *time.Timer
	d    time.Duration
}

func (r idleReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.idle.Reset(r.d)
	}
	return n, err
}

// keepOldestFirst reads a page that is oldest first (a since_id page) and keeps its rows in
// order until lim is reached; the rest of the page is left unread and comes with the next poll,
// which starts after the last row kept. On an error the rows kept so far are returned with it.
func keepOldestFirst(sc *rowScanner, lim pageLimits) (pollPage, error) {
	var pg pollPage
	var held int64
	for {
		row, ok, err := sc.next()
		if err != nil || !ok {
			return pg, err
		}
		pg.rows = append(pg.rows, row)
		held += int64(len(row.raw))
		if len(pg.rows) >= lim.rows || held >= lim.bytes {
			pg.more = true
			return pg, nil
		}
	}
}

// keepOldestOfWindow reads a page that is newest first (a since_secs window) to its end and keeps
// its oldest rows within lim, oldest first: as older rows arrive, the newest kept ones are let
// go. The next poll, since_id the newest row kept, then reads the rows let go, oldest first, so
// no row of the window is skipped and the oldest are answered first. At least one row is kept.
// On an error nothing is kept: without the page's end the oldest rows are unknown.
func keepOldestOfWindow(sc *rowScanner, lim pageLimits) (pollPage, error) {
	var kept []scannedRow // newest first; kept[0] is let go first
	var held int64
	more := false
	for {
		row, ok, err := sc.next()
		if err != nil {
			return pollPage{}, err
		}
		if !ok {
			break
		}
		kept = append(kept, row)
		held += int64(len(row.raw))
		for len(kept) > 1 && (len(kept) > lim.rows || held > lim.bytes) {
			held -= int64(len(kept[0].raw))
			kept[0] = scannedRow{} // let the text go now, not when the slice is reallocated
			kept = kept[1:]
			more = true
		}
	}
	slices.Reverse(kept)
	return pollPage{rows: kept, more: more}, nil
}

// ack tells the platform's mailbox that rows up to seq are consumed.
func (c *platformClient) ack(ctx context.Context, seq int64) error {
	_, err := c.do(ctx, request{
		op: "ack", method: http.MethodPost,
		path: "/workspaces/" + c.ws + "/activity/ack",
		body: map[string]int64{"acked_seq": seq},
	})
	return err
}
