package main

import (
	"bytes"
	"encoding/base64"
	"image"
	"image/color"
	"image/png"
	"testing"

	"github.com/molecule-ai/codex-warm/inbox/molecule/moleculetest"
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
