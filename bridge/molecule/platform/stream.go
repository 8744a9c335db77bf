package platform

// The workspace's event stream (docs/molecule.md, "The event stream"): the connect. Reading
// the events is the inbox's.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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

// MaxEventBytes caps one event's line: an ACTIVITY_LOGGED carries the row's request_body, which a
// hostile or huge row makes as large as it likes. A longer line is skipped, and its event counts
// as one that may mean a new row (the poll reads the row properly, capped).
const MaxEventBytes = 256 << 10

// ReadEvents reads a text/event-stream body until it ends (io.EOF, or why it broke), calling
// alive on every line (a comment too) and event with every event's data. A line longer than
// MaxEventBytes is not held: its event comes with tooLong set and no data.
func ReadEvents(body io.Reader, alive func(), event func(data []byte, tooLong bool)) error {
	r := bufio.NewReaderSize(body, 16<<10)
	var data, line []byte
	tooLong := false
	for {
		var over bool
		var err error
		line, over, err = readLine(r, line[:0], MaxEventBytes)
		if err != nil {
			return err
		}
		alive()
		switch {
		case over:
			tooLong = true
		case len(line) == 0:
			// The end of an event.
			if len(data) > 0 || tooLong {
				event(data, tooLong)
			}
			data, tooLong = data[:0], false
		case line[0] == ':':
			// A comment (the platform's one ": ping" at the start).
		case bytes.HasPrefix(line, []byte("data:")):
			v := bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" "))
			if len(data)+len(v)+1 > MaxEventBytes {
				tooLong = true
				continue
			}
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, v...)
		}
	}
}

// readLine reads the next line into buf, without its line end. over reports a line longer than
// limit, whose content is dropped (only its end is looked for).
func readLine(r *bufio.Reader, buf []byte, limit int) (line []byte, over bool, err error) {
	for {
		frag, err := r.ReadSlice('\n')
		if len(buf)+len(frag) <= limit+2 {
			buf = append(buf, frag...)
		} else {
			over = true
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			return buf, over, err
		}
		return bytes.TrimRight(buf, "\r\n"), over, nil
	}
}
