package main

import (
	"bytes"
	"encoding/base64"
	"image"
	"image/color"
	"image/png"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

// An image file part of a canvas message reaches the model as an input_image of the user's
// message, as the data URL of its bytes, beside the text and the note naming it.
func TestE2EImagePartReachesCodexAsImageInput(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	img := image.NewRGBA(image.Rect(0, 0, 2, 2))
	img.Set(1, 1, color.RGBA{B: 255, A: 255})
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	want := "data:image/png;base64," + base64.StdEncoding.EncodeToString(b.Bytes())

	e := newE2E(t, e2eConfig{})
	d := e.start()
	e.plat.Enqueue(moleculetest.FileMessage("what is in this picture?", "dot.png", "image/png", b.Bytes()))
	d.waitPlatform("the reply", func() bool { return len(e.plat.Notifies()) == 1 })
	reqs := e.mock.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d model requests, want 1", len(reqs))
	}
	if got := reqs[0].LastUserText; got != "what is in this picture?\n\n[attachments: dot.png (image)]" {
		t.Errorf("user text = %q", got)
	}
	if imgs := reqs[0].Images; len(imgs) != 1 || imgs[0].URL != want || imgs[0].Message != 0 {
		t.Fatalf("model saw images %+v, want one in the first user message with URL %.50q…", imgs, want)
	}
	d.stop(stopTimeout)
}

// A PNG of a few bytes declaring 40000×40000 pixels (a decompression bomb: codex would decode
// it into gigabytes) never reaches codex: the message's text runs with a note in place of the
// image, and the chat's reply says the image was not shown and why.
func TestE2EImageBombNeverReachesCodex(t *testing.T) {
	bomb := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR\x00\x00\x9c\x40\x00\x00\x9c\x40\x08\x06\x00\x00\x00\x00\x00\x00\x00")
	e := newE2E(t, e2eConfig{})
	d := e.start()
	e.plat.Enqueue(moleculetest.FileMessage("what is in this picture?", "bomb.png", "image/png", bomb))
	d.waitPlatform("the reply", func() bool { return len(e.plat.Notifies()) == 1 })
	notice := "image 1 not shown: 40000×40000 pixels, over the 40-megapixel limit for images"
	reqs := e.mock.Requests()
	if len(reqs) != 1 || len(reqs[0].Images) != 0 {
		t.Fatalf("model requests %d, the first with %d images; want one without any", len(reqs), len(reqs[0].Images))
	}
	if got := reqs[0].LastUserText; !strings.HasSuffix(got, "["+notice+"]") {
		t.Errorf("codex got %q, want the note in place of the image", got)
	}
	if got := e.notifyTexts()[0]; !strings.HasSuffix(got, "\n\n["+notice+"]") || !strings.HasPrefix(got, "reply #1") {
		t.Errorf("reply %q, want codex's answer and the notice", got)
	}
	d.stop(stopTimeout)
}
