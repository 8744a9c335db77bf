package childproc

import (
	"strings"
	"sync"
)

// Tail keeps the last max bytes written to it. It is the child's stderr sink: codex can log
// a lot over days of uptime, but an error message only needs the end.
type Tail struct {
	mu      sync.Mutex
	buf     []byte
	max     int
	dropped int64 // bytes discarded from the front
}

// NewTail returns a Tail that keeps the last max bytes.
func NewTail(max int) *Tail {
	return &Tail{max: max, buf: make([]byte, 0, min(max, 4096))}
}

// Write implements io.Writer; it never fails.
func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) >= t.max {
		t.dropped += int64(len(t.buf) + len(p) - t.max)
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return n, nil
	}
	if over := len(t.buf) + len(p) - t.max; over > 0 {
		t.dropped += int64(over)
		// copy handles the overlap; the buffer never grows past max.
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

// String returns the tail as valid UTF-8. When bytes were dropped, the partial first line is cut
// and the result starts with "…".
func (t *Tail) String() string {
	t.mu.Lock()
	b := string(t.buf)
	dropped := t.dropped
	t.mu.Unlock()
	if dropped > 0 {
		if i := strings.IndexByte(b, '\n'); i >= 0 && i < len(b)-1 {
			b = b[i+1:]
		}
		b = "…" + b
	}
	return strings.ToValidUTF8(b, "\uFFFD")
}

// Total is the number of bytes ever written.
func (t *Tail) Total() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.dropped + int64(len(t.buf))
}

// Since returns what was written after Total returned mark, as far as it is still held.
func (t *Tail) Since(mark int64) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	start := max(mark-t.dropped, 0)
	if start >= int64(len(t.buf)) {
		return ""
	}
	return strings.ToValidUTF8(string(t.buf[start:]), "\uFFFD")
}
