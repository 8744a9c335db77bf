package molecule

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

// uploadEnv is an inbox answering through a recording Answerer, against the fake platform, with
// its working directory in a temp dir.
type uploadEnv struct {
	p       *moleculetest.Platform
	a       *chattest.Answerer
	cfg     Config
	workDir string
}

func newUploadEnv(t *testing.T, tune func(*Config)) *uploadEnv {
	t.Helper()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	a := chattest.NewAnswerer(nil)
	log, _ := newTestLogger(t)
	cfg := testConfig(p, t.TempDir(), a, log)
	cfg.WorkDir = t.TempDir()
	if tune != nil {
		tune(&cfg)
	}
	start(t, cfg)
	return &uploadEnv{p: p, a: a, cfg: cfg, workDir: cfg.WorkDir}
}

// waitReplies waits for n notifies and returns their texts.
func (e *uploadEnv) waitReplies(t *testing.T, n int) []string {
	t.Helper()
	must(t, e.p.WaitFor(waitCtx(t), func() bool { return len(e.p.Notifies()) >= n }))
	var out []string
	for _, nt := range e.p.Notifies() {
		out = append(out, nt.Message)
	}
	return out
}

// savedPath is where the inbox saves an upload of the canvas chat.
func (e *uploadEnv) savedPath(up moleculetest.Uploaded) string {
	return filepath.Join(e.workDir, chatsDirName, chatDirName("canvas:"+e.p.WorkspaceID()), uploadsDirName,
		up.FileID+"-"+sanitizeFilename(up.Name))
}

// ackedAfterFetch fails unless every ack of an upload followed a complete content answer of it.
func ackedAfterFetch(t *testing.T, p *moleculetest.Platform) {
	t.Helper()
	fetched := map[string]bool{}
	for _, c := range p.Calls() {
		id := filepath.Base(filepath.Dir(c.Path))
		switch c.Route {
		case moleculetest.RouteUploadContent:
			fetched[id] = fetched[id] || c.Status == http.StatusOK
		case moleculetest.RouteUploadAck:
			if !fetched[id] {
				t.Errorf("upload %s acknowledged before its content was read", id)
			}
		}
	}
}

// An image and a file sent by the canvas: the upload rows are not answered, the one message is,
// with the image as an image and the file saved in the chat's folder (0700, the file 0600) and
// named by path; both are acknowledged after they were read.
func TestUploadsImageAndFile(t *testing.T) {
	t.Parallel()
	e := newUploadEnv(t, nil)
	csv := []byte("a,b\n1,2\n")
	up, _ := e.p.SendCanvasFiles("look at these",
		moleculetest.File{Name: "dot.png", MimeType: "image/png", Data: pngBytes},
		moleculetest.File{Name: "../secret dir/data.csv", MimeType: "text/csv", Data: csv})
	replies := e.waitReplies(t, 1)
	must(t, e.p.WaitFor(waitCtx(t), func() bool { return e.p.UploadAcks(up[0].FileID) == 1 && e.p.UploadAcks(up[1].FileID) == 1 }))

	calls := e.a.Calls()
	if len(calls) != 1 || len(replies) != 1 {
		t.Fatalf("%d turns and %d replies, want one of each (the upload rows are not messages)", len(calls), len(replies))
	}
	path := e.savedPath(up[1])
	if want := "look at these\n\n[attachments: dot.png (image), ../secret dir/data.csv (saved as " + path + ")]"; calls[0].Text != want {
		t.Errorf("text = %q\nwant   %q", calls[0].Text, want)
	}
	if len(calls[0].Images) != 1 || calls[0].Images[0] != "data:image/png;base64,"+b64(pngBytes) {
		t.Errorf("images = %.80q", calls[0].Images)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != string(csv) {
		t.Fatalf("saved file %q, %v", got, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("file mode %v, want 0600", fi.Mode())
	}
	for d := filepath.Dir(path); d != e.workDir; d = filepath.Dir(d) {
		if fi, _ := os.Stat(d); fi.Mode().Perm() != 0o700 {
			t.Errorf("%s mode %v, want 0700", d, fi.Mode())
		}
	}
	if replies[0] != "echo: "+calls[0].Text {
		t.Errorf("reply %q carries more than codex's answer; nothing was refused", replies[0])
	}
	ackedAfterFetch(t, e.p)
}

// A file over a limit is not fetched; the chat is told which and why, and the rest of the
// message is answered. The platform's own limits (GET /uploads/limits) apply when lower than the
// daemon's.
func TestUploadsOverLimits(t *testing.T) {
	t.Parallel()
	e := newUploadEnv(t, func(c *Config) { c.MaxImageBytes = 1024 })
	e.p.SetUploadLimits(moleculetest.UploadLimits{PerFileBytes: 100, PerRequestBytes: 150, MaxAttachmentsPerMessage: 10})
	big := make([]byte, 2000)
	copy(big, pngBytes)
	up, _ := e.p.SendCanvasFiles("three files",
		moleculetest.File{Name: "ok.txt", MimeType: "text/plain", Data: make([]byte, 90)},
		moleculetest.File{Name: "big.txt", MimeType: "text/plain", Data: make([]byte, 101)},
		moleculetest.File{Name: "over-total.txt", MimeType: "text/plain", Data: make([]byte, 70)},
		moleculetest.File{Name: "huge.png", MimeType: "image/png", Data: big})
	replies := e.waitReplies(t, 1)
	for _, u := range up[1:] {
		if n := e.p.UploadFetches(u.FileID); n != 0 {
			t.Errorf("%s fetched %d times; a file over a limit is not fetched", u.Name, n)
		}
		if e.p.UploadAcks(u.FileID) != 0 {
			t.Errorf("%s acknowledged; it was not taken", u.Name)
		}
	}
	must(t, e.p.WaitFor(waitCtx(t), func() bool { return e.p.UploadAcks(up[0].FileID) == 1 }))
	for _, want := range []string{
		"[big.txt: not taken: 101 bytes, over the 100 bytes limit for one file]",
		"[over-total.txt: not taken: with it the message's files pass the 150 bytes limit for one message]",
		"[huge.png: image not shown: 2000 bytes, over the 1024-byte cap]",
	} {
		if !strings.Contains(replies[0], want) {
			t.Errorf("reply %q\nlacks %q", replies[0], want)
		}
	}
	calls := e.a.Calls()
	if len(calls) != 1 || !strings.HasPrefix(calls[0].Text, "three files\n\n[attachments: ok.txt (saved as ") ||
		!strings.Contains(calls[0].Text, "big.txt (not taken: 101 bytes") {
		t.Fatalf("turns %+v, want one with the text, the saved file and the refusals", calls)
	}
}

// A body longer than the limit is cut off while it streams, also when the message declared the
// file small: nothing of it is kept.
func TestUploadsBodyOverLimitWhileStreaming(t *testing.T) {
	t.Parallel()
	e := newUploadEnv(t, func(c *Config) { c.MaxUploadBytes = 1000 })
	up := e.p.Upload(moleculetest.File{Name: "liar.bin", MimeType: "application/octet-stream", Data: make([]byte, 5000)})
	lie := up[0]
	lie.Size = 10
	e.p.Enqueue(e.p.CanvasFiles("small, honest", lie))
	replies := e.waitReplies(t, 1)
	if !strings.Contains(replies[0], "[liar.bin: not taken: more than the 1000 bytes limit for it]") {
		t.Errorf("reply %q, want the refusal", replies[0])
	}
	if e.p.UploadAcks(lie.FileID) != 0 {
		t.Error("a file over the limit was acknowledged")
	}
	entries, _ := os.ReadDir(filepath.Dir(e.savedPath(lie)))
	if len(entries) != 0 {
		t.Errorf("the chat's folder holds %d entries, want none", len(entries))
	}
}

// More files than the platform takes a message: the first ten are taken, the rest named to the
// chat, and the message answered once.
func TestUploadsMoreThanTenAttachments(t *testing.T) {
	t.Parallel()
	e := newUploadEnv(t, nil)
	files := make([]moleculetest.File, 12)
	for i := range files {
		files[i] = moleculetest.File{Name: fmt.Sprintf("f%02d.txt", i), MimeType: "text/plain", Data: []byte{byte('a' + i)}}
	}
	up, _ := e.p.SendCanvasFiles("a dozen", files...)
	replies := e.waitReplies(t, 1)
	for i, u := range up {
		want := 0
		if i < 10 {
			want = 1
		}
		must(t, e.p.WaitFor(waitCtx(t), func() bool { return e.p.UploadAcks(u.FileID) == want }))
		if _, err := os.Stat(e.savedPath(u)); (err == nil) != (i < 10) {
			t.Errorf("file %d saved: %v", i, err)
		}
	}
	for _, name := range []string{"f10.txt", "f11.txt"} {
		if !strings.Contains(replies[0], "["+name+": not taken: the message names 12 files, and 10 are taken from one message]") {
			t.Errorf("reply %q does not name %s", replies[0], name)
		}
	}
	if n := len(e.a.Calls()); n != 1 {
		t.Errorf("%d turns, want 1", n)
	}
}

// A redirect on the content is not followed: the token never leaves the platform's origin, the
// file is not taken, and the chat is told.
func TestUploadsRedirectRefused(t *testing.T) {
	t.Parallel()
	elsewhere := moleculetest.NewPlatform(t, moleculetest.Config{})
	e := newUploadEnv(t, nil)
	up := e.p.Upload(moleculetest.File{Name: "doc.txt", MimeType: "text/plain", Data: []byte("x")})
	e.p.RedirectNext(moleculetest.RouteUploadContent, 1, http.StatusFound, elsewhere.URL()+"/workspaces/"+e.p.WorkspaceID()+"/pending-uploads/"+up[0].FileID+"/content")
	e.p.Enqueue(e.p.CanvasFiles("read it", up...))
	replies := e.waitReplies(t, 1)
	if !strings.Contains(replies[0], "[doc.txt: could not be fetched: the platform answered with a redirect, which is not followed]") {
		t.Errorf("reply %q", replies[0])
	}
	if n := len(elsewhere.Calls()); n != 0 {
		t.Errorf("the redirect's target got %d calls", n)
	}
	if n := e.p.CountCalls(moleculetest.RouteUploadContent, 0); n != 1 {
		t.Errorf("%d content calls, want 1: a redirect is final", n)
	}
	if e.p.UploadAcks(up[0].FileID) != 0 {
		t.Error("a file not taken was acknowledged")
	}
}

// A transient failure (5xx, 429, a body that stalls past its deadline) leaves the message
// unanswered and unacknowledged, and the file is fetched again; the ack follows the good read.
func TestUploadsTransientFailuresRetried(t *testing.T) {
	t.Parallel()
	e := newUploadEnv(t, func(c *Config) { c.UploadTimeout = 500 * time.Millisecond })
	up := e.p.Upload(moleculetest.File{Name: "dot.png", MimeType: "image/png", Data: pngBytes})
	e.p.FailNext(moleculetest.RouteUploadContent, 1, http.StatusBadGateway)
	e.p.FailNext(moleculetest.RouteUploadContent, 1, http.StatusTooManyRequests)
	e.p.TrickleUpload(up[0].FileID, 8)
	id := e.p.Enqueue(e.p.CanvasFiles("see", up...))[0]
	// The third try is the slow body: its deadline ends it, and it is tried again.
	must(t, e.p.WaitFor(waitCtx(t), func() bool { return e.p.CountCalls(moleculetest.RouteUploadContent, http.StatusOK) >= 2 }))
	if n := len(e.a.Calls()); n != 0 || len(e.p.Notifies()) != 0 || e.p.UploadAcks(up[0].FileID) != 0 {
		t.Fatalf("while the file cannot be read: %d turns, %d replies, %d acks; want none", n, len(e.p.Notifies()), e.p.UploadAcks(up[0].FileID))
	}
	e.p.TrickleUpload(up[0].FileID, 0)
	replies := e.waitReplies(t, 1)
	calls := e.a.Calls()
	if len(calls) != 1 || len(calls[0].Images) != 1 || strings.Contains(replies[0], "[dot.png") {
		t.Fatalf("turns %d (images %d), reply %q: want the image shown once", len(calls), len(calls[0].Images), replies[0])
	}
	must(t, e.p.WaitFor(waitCtx(t), func() bool { return e.p.UploadAcks(up[0].FileID) == 1 }))
	must(t, e.p.WaitFor(waitCtx(t), stateCond(t, e.cfg.StateDir, func(st stateFile) bool { return st.Cursor == id })))
	ackedAfterFetch(t, e.p)
}

// An upload gone from the platform (expired after its 24 h TTL) is final: the message is answered
// with a note naming the file. A message of that file alone gets the note without a turn.
func TestUploadsExpired(t *testing.T) {
	t.Parallel()
	e := newUploadEnv(t, nil)
	up := e.p.Upload(moleculetest.File{Name: "old.pdf", MimeType: "application/pdf", Data: []byte("%PDF")},
		moleculetest.File{Name: "alone.pdf", MimeType: "application/pdf", Data: []byte("%PDF")})
	e.p.ExpireUpload(up[0].FileID)
	e.p.ExpireUpload(up[1].FileID)
	e.p.Enqueue(e.p.CanvasFiles("summarize", up[0]))
	replies := e.waitReplies(t, 1)
	note := "[old.pdf: could not be fetched: the upload has expired or is gone (HTTP 404)]"
	if !strings.HasPrefix(replies[0], "echo: summarize\n\n[attachments: old.pdf (could not be fetched") || !strings.HasSuffix(replies[0], note) {
		t.Errorf("reply %q, want codex's answer and %q", replies[0], note)
	}
	e.p.Enqueue(e.p.CanvasFiles("", up[1]))
	replies = e.waitReplies(t, 2)
	if want := "None of the files of this message could be taken, and it has no text to answer:\n\n[alone.pdf: could not be fetched: the upload has expired or is gone (HTTP 404)]"; replies[1] != want {
		t.Errorf("reply %q\nwant  %q", replies[1], want)
	}
	if n := len(e.a.Calls()); n != 1 {
		t.Errorf("%d turns, want 1: a message with nothing left is answered without one", n)
	}
}

// A file whose name or folder is hostile is saved under a safe name in the chat's folder, and a
// chat folder replaced by a symbolic link is not written through.
func TestUploadsHostileFolder(t *testing.T) {
	t.Parallel()
	e := newUploadEnv(t, nil)
	outside := t.TempDir()
	chats := filepath.Join(e.workDir, chatsDirName)
	must(t, os.MkdirAll(chats, 0o700))
	must(t, os.Symlink(outside, filepath.Join(chats, chatDirName("canvas:"+e.p.WorkspaceID()))))
	up, _ := e.p.SendCanvasFiles("keep it", moleculetest.File{Name: "x.txt", MimeType: "text/plain", Data: []byte("x")})
	replies := e.waitReplies(t, 1)
	if !strings.Contains(replies[0], "[x.txt: could not be saved in the working directory]") {
		t.Errorf("reply %q", replies[0])
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("the link's target got %d entries", len(entries))
	}
	if e.p.UploadAcks(up[0].FileID) != 0 {
		t.Error("a file not saved was acknowledged")
	}
}

// A message whose turn a shutdown cut off after its file was saved is answered by the next run
// with the file it already has: nothing is fetched twice, nothing is lost.
func TestUploadsSurviveRestart(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	dir, workDir := t.TempDir(), t.TempDir()
	log, _ := newTestLogger(t)
	a1 := chattest.GatedAnswerer(chattest.NewGate()) // never opened: the turn runs until the drain ends
	cfg1 := testConfig(p, dir, a1, log)
	cfg1.WorkDir, cfg1.DrainTimeout = workDir, 50*time.Millisecond
	r1 := start(t, cfg1)
	up, _ := p.SendCanvasFiles("keep this", moleculetest.File{Name: "notes.md", MimeType: "text/markdown", Data: []byte("# notes")})
	must(t, a1.WaitFor(waitCtx(t), func() bool { return len(a1.Calls()) == 1 }))
	must(t, r1.stop())
	if n := len(p.Notifies()); n != 0 || p.UploadFetches(up[0].FileID) != 1 {
		t.Fatalf("first run: %d replies, %d fetches; want none and one", n, p.UploadFetches(up[0].FileID))
	}

	a2 := chattest.NewAnswerer(nil)
	cfg2 := testConfig(p, dir, a2, log)
	cfg2.WorkDir = workDir
	start(t, cfg2)
	must(t, p.WaitFor(waitCtx(t), func() bool { return len(p.Notifies()) == 1 }))
	calls := a2.Calls()
	if len(calls) != 1 || calls[0].Text != a1.Calls()[0].Text {
		t.Fatalf("second run's turns %+v, want the same message as before: %q", calls, a1.Calls()[0].Text)
	}
	if n := p.UploadFetches(up[0].FileID); n != 1 {
		t.Errorf("%d fetches, want 1: the saved file is taken as it is", n)
	}
}
