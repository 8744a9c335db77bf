package chat

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncate(t *testing.T) {
	for _, limit := range []int{0, 1, 5, 20, 40, 41, 100} {
		s := strings.Repeat("é", 30) // 60 bytes
		got := Truncate(s, limit, "message")
		if len(got) > limit && len(s) > limit {
			t.Errorf("limit %d: %d bytes", limit, len(got))
		}
		if !utf8.ValidString(got) {
			t.Errorf("limit %d: invalid UTF-8 %q", limit, got)
		}
	}
	if got := Truncate("short", 10, "message"); got != "short" {
		t.Errorf("short text changed: %q", got)
	}
	if got := Truncate("a\xffb", 10, "m"); got != "a\uFFFDb" {
		t.Errorf("invalid UTF-8 not replaced: %q", got)
	}
}
