package molecule

import (
	"bytes"
	"encoding/base64"
	"image"
	"image/color"
	"image/png"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

// pngBytes is a valid 1×1 PNG.
var pngBytes = func() []byte {
	var b bytes.Buffer
	img := image.NewRGBA(image.Rect(0, 0, 1, 1))
	img.Set(0, 0, color.RGBA{R: 255, A: 255})
	if err := png.Encode(&b, img); err != nil {
		panic(err)
	}
	return b.Bytes()
}()

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// The Molecule inbox hands an image part to the Answerer with the message text, and with the
// default caps (the config leaves them unset).
func TestMoleculeSubmitsImages(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	a := chattest.NewAnswerer(nil)
	log, _ := newTestLogger(t)
	start(t, testConfig(p, t.TempDir(), a, log))

	p.Enqueue(moleculetest.FileMessage("see", "dot.png", "image/png", pngBytes))
	must(t, p.WaitFor(waitCtx(t), func() bool { return len(p.Notifies()) == 1 }))
	calls := a.Calls()
	want := "data:image/png;base64," + b64(pngBytes)
	if len(calls) != 1 || len(calls[0].Images) != 1 || calls[0].Images[0] != want {
		t.Fatalf("Submit calls = %+v, want one with the png as a data URL", calls)
	}
	if calls[0].Text != "see\n\n[attachments: dot.png (image)]" {
		t.Errorf("text = %q", calls[0].Text)
	}
}

// The images of messages waiting for their answer are bounded together: a message whose images
// would pass MaxPendingImageBytes is answered with a note instead of them, and the room comes
// back once the earlier message is answered.
func TestPendingImagesBounded(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	g := chattest.NewGate()
	a := chattest.GatedAnswerer(g)
	log, _ := newTestLogger(t)
	cfg := testConfig(p, t.TempDir(), a, log)
	one := int64(len("data:image/png;base64," + b64(pngBytes)))
	cfg.MaxPendingImageBytes = int(one) + int(one)/2 // room for one message's image
	start(t, cfg)

	p.Enqueue(moleculetest.FileMessage("first", "a.png", "image/png", pngBytes))
	must(t, a.WaitFor(waitCtx(t), func() bool { return len(a.Calls()) == 1 }))
	p.Enqueue(moleculetest.PeerFileMessage("peer-b", "second", "b.png", "image/png", pngBytes))
	must(t, a.WaitFor(waitCtx(t), func() bool { return len(a.Calls()) == 2 }))
	g.Open()
	must(t, p.WaitFor(waitCtx(t), func() bool { return len(p.Notifies())+len(p.A2ASends()) == 2 }))
	p.Enqueue(moleculetest.FileMessage("third", "c.png", "image/png", pngBytes))
	must(t, p.WaitFor(waitCtx(t), func() bool { return len(p.Notifies())+len(p.A2ASends()) == 3 }))

	calls := a.Calls()
	if len(calls) != 3 || len(calls[0].Images) != 1 || len(calls[2].Images) != 1 {
		t.Fatalf("calls %+v: want the first and third with their image", calls)
	}
	if len(calls[1].Images) != 0 || !strings.Contains(calls[1].Text, "1 image(s) not shown") {
		t.Fatalf("second call %+v: want no image and a note", calls[1])
	}
}
