package platform

// The workspace's event stream (docs/molecule.md, "The event stream"): the connect. Reading
// the events is the inbox's.

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"time"
)

// ErrStreamAbsent means the platform offers no event stream.
var ErrStreamAbsent = errors.New("the platform has no event stream")

// OpenEventStream connects to the workspace's event stream. The answer's headers must come within
// timeout (cancel ends ctx with the reason); after them the caller bounds the stream. It returns
// ErrStreamAbsent (wrapped) when the platform has none: 404, 405 or 501, or an answer that is
// not an event stream.
func (c *Client) OpenEventStream(ctx context.Context, cancel context.CancelCauseFunc, timeout time.Duration) (*http.Response, error) {
	headers := time.AfterFunc(timeout, func() { cancel(errors.New("no answer within the request timeout")) })
	resp, err := c.start(ctx, request{op: "event stream", method: http.MethodGet,
		path: "/workspaces/" + c.ws + "/events/stream", accept: "text/event-stream"})
	headers.Stop()
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
			return nil, cause
		}
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented:
		resp.Body.Close()
		return nil, fmt.Errorf("%w (HTTP %d)", ErrStreamAbsent, resp.StatusCode)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		body, _ := c.readSmall("event stream", resp)
		return nil, c.statusErr("event stream", resp, body)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		resp.Body.Close()
		return nil, fmt.Errorf("%w (the answer is %q, not an event stream)", ErrStreamAbsent, resp.Header.Get("Content-Type"))
	}
	return resp, nil
}
