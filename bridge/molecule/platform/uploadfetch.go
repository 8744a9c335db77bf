package platform

// The platform's pending uploads as the client reads them (workspace-server
// internal/handlers/pending_uploads.go, internal/uploads/limits.go): a file's bytes from
// GET /workspaces/{ws}/pending-uploads/{file_id}/content, its hand-off with POST .../ack, and the
// platform's upload limits from GET /uploads/limits.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// UploadLimits are what the daemon takes of one message's uploads.
type UploadLimits struct {
	PerFile        int64
	PerMessage     int64
	MaxAttachments int
}

// TooLargeError is a file over the limit it was fetched under.
type TooLargeError struct {
	Size  int64 // what the platform declared, or the limit+1 bytes read
	Limit int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("upload is %d bytes or more, over the %d-byte limit", e.Size, e.Limit)
}

// BodyError is a failure while the content's body was read (a connection cut, the idle or total
// deadline): the platform may serve it whole next time.
type BodyError struct{ err error }

func (e *BodyError) Error() string { return "read upload content: " + e.err.Error() }
func (e *BodyError) Unwrap() error { return e.err }

// UploadLimits asks the platform's upload limits. Fields the answer lacks (or gives as 0) are 0.
func (c *Client) UploadLimits(ctx context.Context) (UploadLimits, error) {
	body, err := c.do(ctx, request{op: "upload limits", method: http.MethodGet, path: "/uploads/limits"})
	if err != nil {
		return UploadLimits{}, err
	}
	var l struct {
		PerFile        int64 `json:"per_file_bytes"`
		PerRequest     int64 `json:"per_request_bytes"`
		MaxAttachments int   `json:"max_attachments_per_message"`
	}
	if err := json.Unmarshal(body, &l); err != nil {
		return UploadLimits{}, fmt.Errorf("upload limits: %w", err)
	}
	return UploadLimits{PerFile: max(l.PerFile, 0), PerMessage: max(l.PerRequest, 0), MaxAttachments: max(l.MaxAttachments, 0)}, nil
}

// fetchUpload reads the content of pending upload fileID (of this workspace) into sink, at most
// limit bytes: a Content-Length over it fails before the body is read, and a body that goes past
// it fails the read with a *TooLargeError. A redirect is not followed (the client never does);
// it comes back as an *HTTPError like any other non-2xx answer. The body must keep coming: it
// fails (a *BodyError) after idle without a byte and after total in all. sink's own errors
// are returned as they are.
func (c *Client) FetchUpload(ctx context.Context, fileID string, limit int64, total time.Duration, sink func(io.Reader) error) error {
	op := "upload content " + fileID
	parent := ctx
	ctx, cancel := context.WithTimeoutCause(ctx, total, fmt.Errorf("the content took over %s (UploadTimeout)", total))
	defer cancel()
	ctx, cancelIdle := context.WithCancelCause(ctx)
	defer cancelIdle(nil)
	idleErr := fmt.Errorf("no data from the platform for %s (RequestTimeout)", c.timeout)
	idle := time.AfterFunc(c.timeout, func() { cancelIdle(idleErr) })
	defer idle.Stop()
	cause := func(err error) error {
		if parent.Err() == nil && ctx.Err() != nil {
			return fmt.Errorf("%w: %w", context.Cause(ctx), err)
		}
		return err
	}

	resp, err := c.start(ctx, request{op: op, method: http.MethodGet,
		path: "/workspaces/" + c.ws + "/pending-uploads/" + fileID + "/content"})
	if err != nil {
		return cause(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		body, err := c.readSmall(op, resp)
		if err != nil {
			return &BodyError{cause(err)}
		}
		return c.statusErr(op, resp, body)
	}
	if resp.ContentLength > limit {
		return &TooLargeError{Size: resp.ContentLength, Limit: limit}
	}
	r := &cappedReader{r: idleReader{r: resp.Body, idle: idle, d: c.timeout}, left: limit, limit: limit, cause: cause}
	return sink(r)
}

// cappedReader reads at most limit bytes and fails past them; its read errors are *bodyErrors.
type cappedReader struct {
	r     io.Reader
	left  int64
	limit int64
	cause func(error) error
}

func (r *cappedReader) Read(p []byte) (int, error) {
	if r.left < 0 {
		return 0, &TooLargeError{Size: r.limit + 1, Limit: r.limit}
	}
	// One byte more than is left, to tell a body of exactly limit bytes from a longer one.
	if int64(len(p)) > r.left+1 {
		p = p[:r.left+1]
	}
	n, err := r.r.Read(p)
	r.left -= int64(n)
	if r.left < 0 {
		return n - 1, &TooLargeError{Size: r.limit + 1, Limit: r.limit}
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return n, &BodyError{r.cause(err)}
	}
	return n, err
}

// ackUpload tells the platform the upload was taken (idempotent there).
func (c *Client) AckUpload(ctx context.Context, fileID string) error {
	_, err := c.do(ctx, request{op: "upload ack " + fileID, method: http.MethodPost,
		path: "/workspaces/" + c.ws + "/pending-uploads/" + fileID + "/ack"})
	return err
}
