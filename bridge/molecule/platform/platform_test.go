package platform

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// pacedBody hands out its chunks one per Read, waiting before each for the pause given with it,
// and gives up when the request's context ends.
type pacedBody struct {
	ctx    context.Context
	chunks []string
	pauses []time.Duration
}

func (b *pacedBody) Read(p []byte) (int, error) {
	if len(b.chunks) == 0 {
		return 0, io.EOF
	}
	select {
	case <-time.After(b.pauses[0]):
	case <-b.ctx.Done():
		return 0, context.Cause(b.ctx)
	}
	n := copy(p, b.chunks[0])
	b.chunks[0] = b.chunks[0][n:]
	if b.chunks[0] == "" {
		b.chunks, b.pauses = b.chunks[1:], b.pauses[1:]
	}
	return n, nil
}

func (b *pacedBody) Close() error { return nil }

// pacedTransport answers every request 200 with a pacedBody.
type pacedTransport struct {
	chunks []string
	pauses []time.Duration
}

func (t pacedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Request: r,
		Body: &pacedBody{ctx: r.Context(), chunks: append([]string(nil), t.chunks...), pauses: append([]time.Duration(nil), t.pauses...)}}, nil
}

// RequestTimeout bounds each wait for data of the activity page, not the whole page: a page that
// keeps coming is read to its end however long it takes, one that stalls is cut off, and with a
// cursor the rows read before the stall are kept.
func TestPollTimeoutIsPerRead(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		chunks := []string{`[{"id":"a"}`, `,{"id":"b"}`, `,{"id":"c"}`, `]`}
		client := func(pauses ...time.Duration) *Client {
			cfg := Options{URL: "http://platform.test", WorkspaceID: "ws-1", Token: "tok", RequestTimeout: 30 * time.Second, MaxRowBytes: 1 << 10}
			c, err := New(cfg, &http.Client{Transport: pacedTransport{chunks: chunks, pauses: pauses}})
			must(t, err)
			return c
		}
		lim := PageLimits{Rows: 10, Bytes: 1 << 20}

		start := time.Now()
		pg, err := client(20*time.Second, 20*time.Second, 20*time.Second, 20*time.Second).Poll(context.Background(), "x", 600, lim)
		if err != nil || rowsOf(pg.Rows) != "a,b,c" {
			t.Fatalf("slow page: %s, %v; want every row", rowsOf(pg.Rows), err)
		}
		if took := time.Since(start); took != 80*time.Second {
			t.Fatalf("slow page read in %v, want 80s", took)
		}

		// b is complete only once what follows it arrives: the stall keeps a alone.
		pg, err = client(0, 0, time.Minute, 0).Poll(context.Background(), "x", 600, lim)
		if err == nil || !strings.Contains(err.Error(), "no data from the platform for 30s") || rowsOf(pg.Rows) != "a" {
			t.Fatalf("stalled page: %s, %v; want the rows before the stall and the timeout", rowsOf(pg.Rows), err)
		}
		if pg, err = client(0, 0, time.Minute, 0).Poll(context.Background(), "", 600, lim); err == nil || len(pg.Rows) != 0 {
			t.Fatalf("stalled window: %s, %v; want nothing kept and an error", rowsOf(pg.Rows), err)
		}
		if errors.Is(err, context.Canceled) {
			t.Fatalf("stalled window: %v, want the timeout named rather than a cancellation", err)
		}
	})
}
