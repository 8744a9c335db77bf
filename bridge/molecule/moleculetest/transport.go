package moleculetest

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"sync"
)

// Transport is an http.RoundTripper that serves each request with Handler in a goroutine it
// starts (in a synctest bubble, a goroutine of that bubble) and without a socket: a goroutine
// waiting on a socket keeps a bubble's clock from moving. Everything it blocks on is a channel
// made for the request, so waits in a bubble are durable.
//
// RoundTrip returns once the handler has ended (its whole answer in the body) or once it
// flushed: a streamed answer (the event stream, a trickled upload) then reads on from a pipe as
// the handler writes. Closing that body ends the request's context, and so the handler, as a
// client hanging up on a real server does. A hung request (HangNext) blocks until the request's
// context ends or the platform closes.
//
// A stream opened through Transport inside a bubble must only meet writes made from that bubble
// (a goroutine outside it cannot send to the stream's channels).
func (p *Platform) Transport() http.RoundTripper { return handlerTransport{p.Handler()} }

type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(r.Context())
	in := r.Clone(ctx)
	if in.Body == nil {
		in.Body = http.NoBody
	}
	in.RequestURI = r.URL.RequestURI()
	w := newPipeWriter()
	go func() {
		defer in.Body.Close()
		t.h.ServeHTTP(w, in)
		w.finish(ctx)
	}()
	<-w.ready
	if !w.streaming {
		cancel() // the handler has ended
		if err := r.Context().Err(); err != nil {
			return nil, err
		}
		return w.response(r, io.NopCloser(bytes.NewReader(w.buf.Bytes())), int64(w.buf.Len())), nil
	}
	body := &pipeBody{Reader: io.MultiReader(bytes.NewReader(w.buf.Bytes()), w.pr), pr: w.pr, cancel: cancel}
	return w.response(r, body, -1), nil
}

// pipeWriter is the http.ResponseWriter of Transport. Until the handler flushes it keeps the
// answer in memory, as httptest.ResponseRecorder does; the first Flush hands RoundTrip what was
// written so far, and later writes go through a pipe to the client.
//
// Only the handler's goroutine touches it until ready is closed; RoundTrip reads status, header
// and buf only after that (the close orders the two), and the handler no longer touches buf once
// streaming.
type pipeWriter struct {
	header    http.Header
	sent      http.Header // the header as it was when written
	status    int
	buf       bytes.Buffer
	streaming bool
	pr        *io.PipeReader
	pw        *io.PipeWriter
	ready     chan struct{}
	once      sync.Once
}

func newPipeWriter() *pipeWriter {
	pr, pw := io.Pipe()
	return &pipeWriter{header: make(http.Header), pr: pr, pw: pw, ready: make(chan struct{})}
}

func (w *pipeWriter) Header() http.Header { return w.header }

func (w *pipeWriter) WriteHeader(status int) {
	if w.status != 0 {
		return
	}
	w.status = status
	w.sent = w.header.Clone()
}

func (w *pipeWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		if w.header.Get("Content-Type") == "" {
			w.header.Set("Content-Type", http.DetectContentType(b)) // as net/http's server sniffs
		}
		w.WriteHeader(http.StatusOK)
	}
	if w.streaming {
		return w.pw.Write(b)
	}
	return w.buf.Write(b)
}

// Flush starts streaming: RoundTrip returns with what was written so far.
func (w *pipeWriter) Flush() {
	if w.streaming {
		return
	}
	w.WriteHeader(http.StatusOK)
	w.streaming = true
	w.once.Do(func() { close(w.ready) })
}

// finish ends the answer once the handler returned: a streamed body ends (with the request's
// error when the request ended first, as a real body read fails then), or RoundTrip gets the
// whole answer.
func (w *pipeWriter) finish(ctx context.Context) {
	if w.streaming {
		if err := ctx.Err(); err != nil {
			w.pw.CloseWithError(err)
		} else {
			w.pw.Close()
		}
		return
	}
	w.WriteHeader(http.StatusOK)
	w.once.Do(func() { close(w.ready) })
}

func (w *pipeWriter) response(r *http.Request, body io.ReadCloser, length int64) *http.Response {
	if v := w.sent.Get("Content-Length"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			length = n
		}
	}
	return &http.Response{
		Status:        strconv.Itoa(w.status) + " " + http.StatusText(w.status),
		StatusCode:    w.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        w.sent,
		Body:          body,
		ContentLength: length,
		Request:       r,
	}
}

// pipeBody is a streamed answer's body: closing it hangs up, which ends the handler's request
// context and fails its pending and later writes.
type pipeBody struct {
	io.Reader
	pr     *io.PipeReader
	cancel context.CancelFunc
}

func (b *pipeBody) Close() error {
	b.cancel()
	return b.pr.Close()
}
