package childproc

import (
	"strings"
	"testing"
)

func TestTailKeepsTheEnd(t *testing.T) {
	tb := NewTail(16)
	_, _ = tb.Write([]byte("line one\n"))
	if got := tb.String(); got != "line one\n" {
		t.Errorf("short tail %q", got)
	}
	mark := tb.Total()
	_, _ = tb.Write([]byte("line two\nline three\n"))
	if got := tb.String(); got != "…line three\n" {
		t.Errorf("tail %q, want the last whole line", got)
	}
	if got := tb.Since(mark); got != " two\nline three\n" {
		t.Errorf("since %q, want what is still held of the later writes", got)
	}
	_, _ = tb.Write([]byte(strings.Repeat("x", 40)))
	if got := tb.String(); got != "…"+strings.Repeat("x", 16) || tb.Total() != 9+20+40 {
		t.Errorf("after a big write: %q total %d", got, tb.Total())
	}
}
