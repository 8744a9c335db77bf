package chatfiles_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/molecule-ai/codex-warm/internal/chatfiles"
)

const token = "sk-live-THE-WORKSPACE-TOKEN-0123456789"

// layout is a working directory with two chats' folders, a CODEX_HOME and a state directory
// beside them, as the daemon lays them out.
type layout struct {
	root, chat, other, home, state string
}

func newLayout(t *testing.T) layout {
	t.Helper()
	root := t.TempDir()
	l := layout{root: root, chat: filepath.Join(root, "work", ".chats", "canvas_a-0123"),
		other: filepath.Join(root, "work", ".chats", "canvas_b-4567"),
		home:  filepath.Join(root, "codex-home"), state: filepath.Join(root, "state")}
	for _, d := range []string{filepath.Join(l.chat, "uploads"), filepath.Join(l.other, "uploads"), l.home, l.state} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(l.home, "auth.json"), `{"tokens":{"access_token":"`+token+`"}}`)
	write(t, filepath.Join(l.state, "sessions.json"), `{"canvas:a":"thread"}`)
	write(t, filepath.Join(l.other, "uploads", "f1-secret-plan.pdf"), "the other user's upload")
	return l
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

var lim = chatfiles.Limits{MaxFileBytes: 1 << 20}

func copyOf(l layout, name string) (string, chatfiles.Info, error) {
	var buf bytes.Buffer
	info, err := chatfiles.Copy(l.chat, name, lim, chatfiles.SecretList{token}, &buf)
	return buf.String(), info, err
}

func TestCopySendsAFileOfTheChatsFolder(t *testing.T) {
	l := newLayout(t)
	write(t, filepath.Join(l.chat, "report.txt"), "the report")
	for _, name := range []string{"report.txt", "./report.txt", filepath.Join(l.chat, "report.txt")} {
		got, info, err := copyOf(l, name)
		if err != nil || got != "the report" || info.Name != "report.txt" || info.Size != 10 || info.MimeType != "text/plain" {
			t.Errorf("Copy(%q) = %q, %+v, %v; want the report as text/plain", name, got, info, err)
		}
	}
}

func TestCopyRefusesWhatMayNotLeave(t *testing.T) {
	l := newLayout(t)
	// A copy of auth.json inside the chat's folder: the path is fine, the content is not.
	b, _ := os.ReadFile(filepath.Join(l.home, "auth.json"))
	write(t, filepath.Join(l.chat, "notes.txt"), "harmless start\n"+string(b))
	if err := os.Symlink("/etc/passwd", filepath.Join(l.chat, "passwd")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(l.other, filepath.Join(l.chat, "other")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(l.chat, "linked.txt"), "two names")
	if err := os.Link(filepath.Join(l.chat, "linked.txt"), filepath.Join(l.root, "elsewhere.txt")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(l.chat, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(l.chat, "big.bin"), strings.Repeat("x", int(lim.MaxFileBytes)+1))
	for name, c := range map[string]struct {
		kind chatfiles.RefusalKind
		why  string
	}{
		filepath.Join(l.home, "auth.json"):                   {chatfiles.RefusedOutside, "outside this chat's folder"},
		"../../../codex-home/auth.json":                      {chatfiles.RefusedOutside, "outside this chat's folder"},
		"../../../state/sessions.json":                       {chatfiles.RefusedOutside, "outside this chat's folder"},
		"passwd":                                             {chatfiles.RefusedLink, "symbolic link"},
		"other/uploads/f1-secret-plan.pdf":                   {chatfiles.RefusedLink, "symbolic link"},
		"../canvas_b-4567/uploads/f1-secret-plan.pdf":        {chatfiles.RefusedOutside, "outside this chat's folder"},
		filepath.Join(l.other, "uploads/f1-secret-plan.pdf"): {chatfiles.RefusedOutside, "outside this chat's folder"},
		"notes.txt":   {chatfiles.RefusedSecret, "credential"},
		"linked.txt":  {chatfiles.RefusedHardLinks, "hard links"},
		"fifo":        {chatfiles.RefusedNotRegular, "not a regular file"},
		"uploads":     {chatfiles.RefusedNotRegular, "not a regular file"},
		"big.bin":     {chatfiles.RefusedTooLarge, "over the limit"},
		"missing.txt": {chatfiles.RefusedMissing, "no such file"},
	} {
		got, _, err := copyOf(l, name)
		var r *chatfiles.Refusal
		if !errors.As(err, &r) || r.Kind != c.kind || !strings.Contains(r.Reason, c.why) || r.Path != name {
			t.Errorf("Copy(%q) = %+v; want a %s refusal saying %q", name, err, c.kind, c.why)
		}
		if strings.Contains(got, token) {
			t.Errorf("Copy(%q) wrote the token", name)
		}
	}
}

// A file too large is refused naming the limit that applies: the file's own, or what is left of
// the reply's budget for its files. A file exactly at the limit goes.
func TestCopyTooLargeNamesTheLimit(t *testing.T) {
	l := newLayout(t)
	for _, c := range []struct {
		size int
		lim  chatfiles.Limits
		why  string // "" when it goes
	}{
		{101, chatfiles.Limits{MaxFileBytes: 100}, "it is 101 bytes, over the limit of 100 bytes a file"},
		{100, chatfiles.Limits{MaxFileBytes: 100}, ""},
		{101, chatfiles.Limits{MaxFileBytes: 100, ReplyBytes: 1000, ReplyUsed: 500}, "it is 101 bytes, over the limit of 100 bytes a file"},
		{1001, chatfiles.Limits{MaxFileBytes: 1000, ReplyBytes: 1000}, "it is 1001 bytes, over this reply's budget of 1000 bytes for files"},
		{60, chatfiles.Limits{MaxFileBytes: 1000, ReplyBytes: 1000, ReplyUsed: 950}, "it is 60 bytes, over the 50 bytes left of this reply's budget of 1000 bytes for files"},
		{50, chatfiles.Limits{MaxFileBytes: 1000, ReplyBytes: 1000, ReplyUsed: 950}, ""},
		{60, chatfiles.Limits{MaxFileBytes: 100, ReplyBytes: 1000, ReplyUsed: 950}, "it is 60 bytes, over the 50 bytes left of this reply's budget of 1000 bytes for files"},
		{1, chatfiles.Limits{MaxFileBytes: 1000, ReplyBytes: 1000, ReplyUsed: 1000}, "it is 1 byte, over the 0 bytes left of this reply's budget of 1000 bytes for files"},
	} {
		write(t, filepath.Join(l.chat, "f.bin"), strings.Repeat("x", c.size))
		_, err := chatfiles.Copy(l.chat, "f.bin", c.lim, nil, &bytes.Buffer{})
		var r *chatfiles.Refusal
		switch {
		case c.why == "" && err != nil:
			t.Errorf("%d bytes under %+v: %v; want it sent", c.size, c.lim, err)
		case c.why != "" && (!errors.As(err, &r) || r.Kind != chatfiles.RefusedTooLarge || r.Reason != c.why):
			t.Errorf("%d bytes under %+v: %v; want a too_large refusal saying %q", c.size, c.lim, err, c.why)
		}
	}
}

// growingWriter appends to the file at path when it is first written to: the file grows while
// Copy reads it.
type growingWriter struct {
	path  string
	grown bool
}

func (w *growingWriter) Write(b []byte) (int, error) {
	if !w.grown {
		w.grown = true
		f, err := os.OpenFile(w.path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		if _, err := f.WriteString(strings.Repeat("y", 100)); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}

// A file that grows past the limit while it is read is refused naming the limit, as one too large
// to begin with is.
func TestCopyGrowingFileNamesTheLimit(t *testing.T) {
	l := newLayout(t)
	// One whole read (Copy reads 64 KiB at a time) before the file grows.
	const size = 64 << 10
	for _, c := range []struct {
		lim chatfiles.Limits
		why string
	}{
		{chatfiles.Limits{MaxFileBytes: size + 10}, "it grew over the limit of 65546 bytes a file while being read"},
		{chatfiles.Limits{MaxFileBytes: 1 << 20, ReplyBytes: size + 10}, "it grew over this reply's budget of 65546 bytes for files while being read"},
		{chatfiles.Limits{MaxFileBytes: 1 << 20, ReplyBytes: size + 20, ReplyUsed: 10}, "it grew over the 65546 bytes left of this reply's budget of 65556 bytes for files while being read"},
	} {
		path := filepath.Join(l.chat, "growing.bin")
		write(t, path, strings.Repeat("x", size))
		_, err := chatfiles.Copy(l.chat, "growing.bin", c.lim, nil, &growingWriter{path: path})
		var r *chatfiles.Refusal
		if !errors.As(err, &r) || r.Kind != chatfiles.RefusedTooLarge || r.Reason != c.why {
			t.Errorf("under %+v: %v; want a too_large refusal saying %q", c.lim, err, c.why)
		}
	}
}

// A secret that straddles two reads is found all the same.
func TestCopyFindsASecretAcrossReads(t *testing.T) {
	l := newLayout(t)
	pad := strings.Repeat("a", 64<<10-len(token)/2)
	write(t, filepath.Join(l.chat, "straddle.txt"), pad+token+"tail")
	if _, _, err := copyOf(l, "straddle.txt"); err == nil || !strings.Contains(err.Error(), "credential") {
		t.Fatalf("Copy = %v; want the credential refusal", err)
	}
}

// A relative path that climbs out of the chat's folder is refused as outside it, whatever lies on
// the way: a path named from the working directory (.chats/<this chat>/../..) as much as one from
// the folder, and one through a folder that does not exist (which openat2 would call missing).
func TestCopyRefusesClimbingOutAsOutside(t *testing.T) {
	l := newLayout(t)
	workDir := filepath.Join(l.root, "work")
	own := filepath.Join(chatfiles.ChatsDirName, filepath.Base(l.chat))
	for _, name := range []string{
		own + "/../../../codex-home/auth.json",
		"./" + own + "/../../../codex-home/auth.json",
		own + "/../canvas_b-4567/uploads/f1-secret-plan.pdf",
		"../../x",
		"..",
		"nowhere/../../x",
		"uploads/../../canvas_b-4567/uploads/f1-secret-plan.pdf",
	} {
		_, err := chatfiles.Copy(l.chat, chatfiles.FromWorkDir(workDir, name), lim, chatfiles.SecretList{token}, &bytes.Buffer{})
		var r *chatfiles.Refusal
		if !errors.As(err, &r) || r.Kind != chatfiles.RefusedOutside || !strings.Contains(r.Reason, "outside this chat's folder") {
			t.Errorf("Copy(%q) = %v; want it refused as outside this chat's folder", name, err)
		}
	}
}

func TestFromWorkDir(t *testing.T) {
	for in, want := range map[string]string{
		".chats/c-1/a.txt":                   "/w/.chats/c-1/a.txt",
		"./.chats/c-1/a.txt":                 "/w/.chats/c-1/a.txt",
		".chats/c-1/../../../h/auth.json":    "/h/auth.json",
		"./.chats/c-1/../../../h/auth.json":  "/h/auth.json",
		".chats/c-1/../c-2/uploads/f1-a.pdf": "/w/.chats/c-2/uploads/f1-a.pdf",
		"a.txt":                              "a.txt",
		"/abs/a.txt":                         "/abs/a.txt",
		"../.chats/x":                        "../.chats/x",
		"x/../.chats/c-1/a.txt":              "x/../.chats/c-1/a.txt",
	} {
		if got := chatfiles.FromWorkDir("/w", in); got != want {
			t.Errorf("FromWorkDir(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseArgs(t *testing.T) {
	a, err := chatfiles.ParseArgs([]byte(`{"path":"a.png","caption":"the chart"}`))
	if err != nil || a.Path != "a.png" || a.Caption != "the chart" {
		t.Fatalf("ParseArgs = %+v, %v", a, err)
	}
	for _, bad := range []string{`{}`, `{"path":" "}`, `[1]`, `nope`} {
		if _, err := chatfiles.ParseArgs([]byte(bad)); err == nil {
			t.Errorf("ParseArgs(%s) took it", bad)
		}
	}
}

// A refusal's text goes to the model and into the reply, and from there to the chat's people and
// peer agents: it names the file as the agent did and never the host's paths. The cause behind
// it, with the paths, is for the daemon's log.
func TestCopyRefusalsNameNoHostPath(t *testing.T) {
	l := newLayout(t)
	for _, name := range []string{
		filepath.Join(l.home, "auth.json"),
		"../../../codex-home/auth.json",
		"../canvas_b-4567/uploads/f1-secret-plan.pdf",
		"missing.txt",
		"uploads/missing.txt",
	} {
		_, _, err := copyOf(l, name)
		var r *chatfiles.Refusal
		if !errors.As(err, &r) {
			t.Fatalf("Copy(%q) = %v; want a refusal", name, err)
		}
		if why := strings.ReplaceAll(err.Error(), name, "<name>"); strings.Contains(why, l.root) {
			t.Errorf("Copy(%q) = %q; it names a host path", name, err)
		}
	}
	_, _, err := copyOf(l, "missing.txt")
	if cause := errors.Unwrap(err); cause == nil || !strings.Contains(cause.Error(), filepath.Join(l.chat, "missing.txt")) {
		t.Errorf("Copy(missing.txt)'s cause is %v; want one naming the file's full path, for the log", cause)
	}

	gone := filepath.Join(l.root, "work", ".chats", "gone-89ab")
	_, err = chatfiles.Copy(gone, "a.txt", lim, nil, &bytes.Buffer{})
	var r *chatfiles.Refusal
	if !errors.As(err, &r) || r.Kind != chatfiles.RefusedOther || strings.Contains(err.Error(), l.root) {
		t.Errorf("Copy from a folder that is not there = %q; want a refusal naming no host path", err)
	}
	if cause := errors.Unwrap(err); cause == nil || !strings.Contains(cause.Error(), gone) {
		t.Errorf("the cause is %v; want one naming the folder, for the log", cause)
	}
}
