package main

import (
	"bytes"
	"encoding/base64"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

// A canvas user sends an image as the canvas does: the platform stages it as a pending upload
// and writes a chat_upload_receive row, then the message row names it by platform-pending: URI
// with no bytes. The daemon runs exactly one turn, in which the model sees the image as an
// input_image; it fetches and acknowledges the upload; the upload row gets no reply.
func TestE2EMoleculeUploadedImageReachesCodex(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	img := image.NewRGBA(image.Rect(0, 0, 3, 2))
	img.Set(2, 1, color.RGBA{R: 255, A: 255})
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	want := "data:image/png;base64," + base64.StdEncoding.EncodeToString(b.Bytes())

	e := newE2E(t, e2eConfig{})
	d := e.start()
	up, _ := e.plat.SendCanvasFiles("what is in this picture?", moleculetest.File{Name: "red dot.png", MimeType: "image/png", Data: b.Bytes()})
	d.waitPlatform("the reply", func() bool { return len(e.plat.Notifies()) == 1 })
	d.waitPlatform("the upload's ack", func() bool { return e.plat.UploadAcks(up[0].FileID) == 1 })
	reqs := e.mock.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d model requests, want 1 (one turn for the message, none for the upload row)", len(reqs))
	}
	if got := reqs[0].LastUserText; got != "what is in this picture?\n\n[attachments: red dot.png (image)]" {
		t.Errorf("user text = %q", got)
	}
	if imgs := reqs[0].Images; len(imgs) != 1 || imgs[0].URL != want {
		t.Fatalf("model saw images %+v, want one with URL %.50q…", imgs, want)
	}
	if got := e.notifyTexts(); len(got) != 1 || !strings.HasPrefix(got[0], "reply #1") {
		t.Errorf("replies %q, want codex's one answer", got)
	}
	assertFetchedBeforeAck(t, e.plat, up[0].FileID)
	d.stop(stopTimeout)
	// Both rows are finished: nothing is left for the next run.
	if st := e.bridgeState(); len(st.Pending) != 0 {
		t.Errorf("replies still pending after stop: %+v", st.Pending)
	}
}

// A file that is not an image lands in the chat's own folder under the working directory, mode
// 0600, and its path is in the prompt the model got.
func TestE2EMoleculeUploadedFileLandsInChatFolder(t *testing.T) {
	t.Parallel()
	data := []byte("col1,col2\n1,2\n")
	e := newE2E(t, e2eConfig{})
	d := e.start()
	up, _ := e.plat.SendCanvasFiles("sum the columns", moleculetest.File{Name: "../../etc/Data Sheet.csv", MimeType: "text/csv", Data: data})
	d.waitPlatform("the reply", func() bool { return len(e.plat.Notifies()) == 1 })
	d.waitPlatform("the upload's ack", func() bool { return e.plat.UploadAcks(up[0].FileID) == 1 })
	reqs := e.mock.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d model requests, want 1", len(reqs))
	}
	matches, err := filepath.Glob(filepath.Join(e.workDir, ".chats", "*", "uploads", up[0].FileID+"-Data_Sheet.csv"))
	if err != nil || len(matches) != 1 {
		t.Fatalf("staged file: %v %v; want one under %s/.chats/<chat>/uploads", matches, err, e.workDir)
	}
	path := matches[0]
	if !strings.Contains(filepath.Base(filepath.Dir(filepath.Dir(path))), "canvas") {
		t.Errorf("staged in %s, want the canvas chat's folder", path)
	}
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("staged content %q (%v), want %q", got, err, data)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("staged file mode %v (%v), want 0600", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Dir(path)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("uploads folder mode %v (%v), want 0700", fi.Mode(), err)
	}
	if text := reqs[0].LastUserText; !strings.HasPrefix(text, "sum the columns\n\n") || !strings.Contains(text, path) {
		t.Errorf("prompt %q, want the text and the staged path %s", text, path)
	}
	assertFetchedBeforeAck(t, e.plat, up[0].FileID)
	d.stop(stopTimeout)
}

// assertFetchedBeforeAck checks that the upload's ack came after its content was read.
func assertFetchedBeforeAck(t *testing.T, p *moleculetest.Platform, fileID string) {
	t.Helper()
	fetched := false
	for _, c := range p.Calls() {
		if !strings.Contains(c.Path, fileID) {
			continue
		}
		switch c.Route {
		case moleculetest.RouteUploadContent:
			fetched = fetched || c.Status == 200
		case moleculetest.RouteUploadAck:
			if !fetched {
				t.Errorf("upload %s acknowledged before its content was read", fileID)
			}
		}
	}
	if !fetched {
		t.Errorf("upload %s never read", fileID)
	}
}

// An uploaded PNG of a few bytes declaring 40000×40000 pixels is fetched like any image and then
// refused by the same header check as an inline one: codex never gets it, the chat hears why.
func TestE2EMoleculeUploadedImageBombNeverReachesCodex(t *testing.T) {
	t.Parallel()
	bomb := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR\x00\x00\x9c\x40\x00\x00\x9c\x40\x08\x06\x00\x00\x00\x00\x00\x00\x00")
	e := newE2E(t, e2eConfig{})
	d := e.start()
	e.plat.SendCanvasFiles("what is in this picture?", moleculetest.File{Name: "bomb.png", MimeType: "image/png", Data: bomb})
	d.waitPlatform("the reply", func() bool { return len(e.plat.Notifies()) == 1 })
	reqs := e.mock.Requests()
	if len(reqs) != 1 || len(reqs[0].Images) != 0 {
		t.Fatalf("model requests %d, the first with %d images; want one without any", len(reqs), len(reqs[0].Images))
	}
	notice := "image 1 not shown: 40000×40000 pixels, over the 40-megapixel limit for images"
	if got := e.notifyTexts()[0]; !strings.HasSuffix(got, "\n\n["+notice+"]") || !strings.HasPrefix(got, "reply #1") {
		t.Errorf("reply %q, want codex's answer and the notice", got)
	}
	d.stop(stopTimeout)
}
