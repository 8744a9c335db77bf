package local

import (
	"net/http"
	"time"
)

// deadlineWriter gives every write of an answer its own deadline (Config.WriteTimeout): the
// headers, each Write (a plain answer is one, an event stream's event is one) and each Flush.
// A client that stops reading then holds its connection, and the answer it does not read, for
// one WriteTimeout after its turn ended, not forever: the write fails, the handler returns and
// net/http closes the connection. The deadline is set per write, not per request, because the
// caller of a long turn waits minutes for its first byte, and an event stream writes for as long
// as its turn runs. An http.Server WriteTimeout would cut both.
type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func newDeadlineWriter(w http.ResponseWriter, timeout time.Duration) *deadlineWriter {
	return &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: timeout}
}

// arm starts the deadline of the write about to happen. Errors are ignored: a writer that has
// no deadlines (a test recorder) writes without one.
func (d *deadlineWriter) arm() { _ = d.rc.SetWriteDeadline(time.Now().Add(d.timeout)) }

// WriteHeader arms the deadline: the headers may go out only when the handler returns, and an
// earlier request's deadline on a kept-alive connection must not be the one that applies.
func (d *deadlineWriter) WriteHeader(status int) {
	d.arm()
	d.ResponseWriter.WriteHeader(status)
}

func (d *deadlineWriter) Write(b []byte) (int, error) {
	d.arm()
	return d.ResponseWriter.Write(b)
}

// FlushError is what http.ResponseController.Flush calls.
func (d *deadlineWriter) FlushError() error {
	d.arm()
	return d.rc.Flush()
}

// Unwrap lets http.ResponseController reach the connection's writer (read deadlines, hijack).
func (d *deadlineWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }
