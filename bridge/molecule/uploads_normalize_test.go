package molecule

import (
	"path/filepath"
	"strings"
	"testing"
)

// Saved names follow the platform's SanitizeFilename: no path, no separators, no control or
// shell characters, a bounded length that keeps a short extension.
func TestSanitizeFilename(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 150) + ".tar.gz"
	for in, want := range map[string]string{
		"report.pdf":             "report.pdf",
		"../../etc/passwd":       "passwd",
		"/abs/path/x.txt":        "x.txt",
		"dir/":                   "dir",
		"":                       "file",
		".":                      "file",
		"..":                     "file",
		"..\\..\\win.ini":        ".._.._win.ini",
		"a b;rm -rf ~.sh":        "a_b_rm_-rf__.sh",
		"nul\x00byte\n.txt":      "nul_byte_.txt",
		"résumé.pdf":             "r_sum_.pdf",
		"$(id)`x`.png":           "__id__x_.png",
		long:                     strings.Repeat("a", 97) + ".gz",
		strings.Repeat("b", 200): strings.Repeat("b", 100),
	} {
		got := sanitizeFilename(in)
		if got != want {
			t.Errorf("sanitizeFilename(%q) = %q, want %q", in, got, want)
		}
		if strings.ContainsAny(got, "/\\\x00") || len(got) > maxSavedNameLen || filepath.Base(got) != got {
			t.Errorf("sanitizeFilename(%q) = %q is not a plain name", in, got)
		}
	}
}

// Chat folders are plain names, and keys that sanitize alike stay apart.
func TestChatDirName(t *testing.T) {
	t.Parallel()
	a, b := chatDirName("canvas:ws-1"), chatDirName("canvas_ws-1")
	if a == b || !strings.HasPrefix(a, "canvas_ws-1-") || filepath.Base(a) != a {
		t.Errorf("chatDirName: %q and %q", a, b)
	}
	if d := chatDirName("peer:../../x/" + strings.Repeat("y", 300)); strings.ContainsAny(d, "/\\") || len(d) > 64+13 {
		t.Errorf("hostile key gives %q", d)
	}
}
