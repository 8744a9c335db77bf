package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// ErrNoDaemon means no daemon answers on the state directory's control socket.
var ErrNoDaemon = errors.New("no supervisor daemon is running")

// MaxSocketPath is the longest path a unix socket can have on Linux.
const MaxSocketPath = 107

// maxAnswerBytes bounds an answer read from the socket.
const maxAnswerBytes = 64 << 20

// Timeouts of the Client's verbs.
const (
	StatusTimeout = 5 * time.Second
	ReloadTimeout = 10 * time.Second
	StopTimeout   = 30 * time.Second
)

// Client asks the daemon owning a state directory on its control socket.
type Client struct {
	dir  string
	path string
}

// NewClient returns a Client for the daemon owning stateDir.
func NewClient(stateDir string) *Client {
	return &Client{dir: stateDir, path: filepath.Join(stateDir, SocketName)}
}

// Path is the control socket's path.
func (c *Client) Path() string { return c.path }

// Status asks for the daemon's status document.
func (c *Client) Status(ctx context.Context) (StatusDoc, error) {
	code, body, err := c.Do(ctx, VerbStatus, nil, StatusTimeout)
	if err != nil {
		return StatusDoc{}, err
	}
	if code != http.StatusOK {
		return StatusDoc{}, fmt.Errorf("what answers at %s is not the daemon's status: HTTP %d: %s", c.path, code, capBytes(body, 4096))
	}
	var doc StatusDoc
	if err := json.Unmarshal(body, &doc); err != nil {
		return StatusDoc{}, fmt.Errorf("decode status from %s: %w", c.path, err)
	}
	return doc, nil
}

// Reload asks the daemon to reload as SIGHUP does and returns its attempt number. A refusal is
// an *Error.
func (c *Client) Reload(ctx context.Context) (ReloadAnswer, error) {
	return Call[Empty, ReloadAnswer](ctx, c, VerbReload, Empty{}, ReloadTimeout)
}

// Stop asks the daemon to drain and exit as SIGTERM does; it does not wait for the exit.
func (c *Client) Stop(ctx context.Context) error {
	_, err := Call[Empty, Empty](ctx, c, VerbStop, Empty{}, StopTimeout)
	return err
}

// Call sends verb with req (no body for Empty) and decodes the answer into a Resp. An error
// answer ({"error": …}) is an *Error with its HTTP status; an answer that is neither is an
// error saying what answered.
func Call[Req, Resp any](ctx context.Context, c *Client, verb string, req Req, timeout time.Duration) (Resp, error) {
	var resp Resp
	var body []byte
	if _, empty := any(req).(Empty); !empty {
		b, err := json.Marshal(req)
		if err != nil {
			return resp, fmt.Errorf("%s: encode the request: %w", verb, err)
		}
		body = b
	}
	code, ans, err := c.Do(ctx, verb, body, timeout)
	if err != nil {
		return resp, err
	}
	if code < 200 || code > 299 {
		var e errorAnswer
		if json.Unmarshal(ans, &e) == nil && e.Error != "" {
			return resp, &Error{Status: code, Msg: e.Error}
		}
		return resp, fmt.Errorf("what answers at %s is not the daemon's %s: HTTP %d: %s", c.path, verb, code, capBytes(ans, 4096))
	}
	if len(bytes.TrimSpace(ans)) == 0 {
		return resp, nil
	}
	if err := json.Unmarshal(ans, &resp); err != nil {
		return resp, fmt.Errorf("what answers at %s is not the daemon's %s: HTTP %d: %s", c.path, verb, code, capBytes(ans, 4096))
	}
	return resp, nil
}

// Do sends verb ("GET /v1/status") with body (nil for none) within timeout, and returns the
// HTTP status and the answer (at most 64 MiB). It fails with ErrNoDaemon when no daemon listens
// on the socket.
func (c *Client) Do(ctx context.Context, verb string, body []byte, timeout time.Duration) (int, []byte, error) {
	method, urlPath, ok := strings.Cut(verb, " ")
	if !ok {
		return 0, nil, fmt.Errorf("verb %q is not METHOD PATH", verb)
	}
	// The daemon could not listen on a longer path either (sockaddr_un holds 108 bytes with the
	// terminating NUL); dialing it fails with a bare EINVAL.
	if len(c.path) > MaxSocketPath {
		return 0, nil, fmt.Errorf("%w (state dir %s: its socket path %s is %d bytes, too long for a unix socket: at most %d)",
			ErrNoDaemon, c.dir, c.path, len(c.path), MaxSocketPath)
	}
	hc := &http.Client{
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", c.path)
			},
		},
		Timeout: timeout,
	}
	defer hc.CloseIdleConnections()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://supervisor"+urlPath, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		switch {
		case errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOENT):
			return 0, nil, fmt.Errorf("%w (state dir %s, no socket at %s)", ErrNoDaemon, c.dir, c.path)
		case errors.Is(err, syscall.ECONNREFUSED):
			return 0, nil, fmt.Errorf("%w (state dir %s: nobody listens on %s, left by a daemon that died)", ErrNoDaemon, c.dir, c.path)
		case errors.Is(err, syscall.ENOTDIR):
			return 0, nil, fmt.Errorf("%w (state dir %s, or a directory above it, is not a directory)", ErrNoDaemon, c.dir)
		}
		return 0, nil, fmt.Errorf("cannot ask the daemon at %s: %w", c.path, err)
	}
	defer resp.Body.Close()
	ans, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return 0, nil, fmt.Errorf("read answer of daemon at %s: %w", c.path, err)
	}
	return resp.StatusCode, ans, nil
}

// Excerpt is an answer trimmed and cut to 4 KiB, for an error message that quotes it.
func Excerpt(b []byte) []byte { return capBytes(b, 4096) }

// capBytes is b trimmed and cut to n bytes, for an error message.
func capBytes(b []byte, n int) []byte {
	b = bytes.TrimSpace(b)
	if len(b) > n {
		return b[:n]
	}
	return b
}
