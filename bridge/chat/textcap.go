package chat

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// DefaultMaxTextBytes caps the text of one inbound message, on either inbox: the Molecule inbox
// cuts a longer text (with a note), the local inbox refuses it.
const DefaultMaxTextBytes = 64 << 10

// Truncate returns s when it fits in limit bytes. Otherwise it keeps a prefix cut at a rune
// boundary and appends "\n[<what> truncated: N bytes omitted]" so the reader knows text is missing;
// the result never exceeds limit bytes. Invalid UTF-8 is replaced first so the result is valid.
func Truncate(s string, limit int, what string) string {
	out, _ := TruncateN(s, limit, what)
	return out
}

// TruncateN is Truncate that also reports how many bytes of s were dropped.
func TruncateN(s string, limit int, what string) (string, int) {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= limit {
		return s, 0
	}
	if limit <= 0 {
		return "", len(s)
	}
	const format = "\n[%s truncated: %d bytes omitted]"
	// The omitted count is at most len(s), so this note is at least as long as the final one.
	noteLen := len(fmt.Sprintf(format, what, len(s)))
	if limit < noteLen {
		keep := RuneStart(s, limit)
		return s[:keep], len(s) - keep
	}
	keep := RuneStart(s, limit-noteLen)
	return s[:keep] + fmt.Sprintf(format, what, len(s)-keep), len(s) - keep
}

// CapText is Truncate for error excerpts.
func CapText(s string, limit int) string { return Truncate(s, limit, "text") }

// RuneStart returns the largest i <= n at which a rune of s starts (or len(s)).
func RuneStart(s string, n int) int {
	if n >= len(s) {
		return len(s)
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return n
}
