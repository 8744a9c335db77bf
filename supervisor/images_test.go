package supervisor

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"image"
	"image/png"
	"slices"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/supervisor/images"
)

// bombPNG is a PNG signature and IHDR declaring w×h: what codex would decode into w×h×4 bytes.
func bombPNG(w, h uint32) string {
	b := []byte("\x89PNG\r\n\x1a\n")
	b = binary.BigEndian.AppendUint32(b, 13)
	b = append(b, "IHDR"...)
	b = binary.BigEndian.AppendUint32(b, w)
	b = binary.BigEndian.AppendUint32(b, h)
	b = append(b, 8, 6, 0, 0, 0, 0, 0, 0, 0)
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(b)
}

func smallPNG(t *testing.T) string {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewRGBA(image.Rect(0, 0, 3, 2))); err != nil {
		t.Fatal(err)
	}
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(b.Bytes())
}

func TestScreenImages(t *testing.T) {
	ok := smallPNG(t)
	kept, notices := images.Screen([]string{
		ok,
		bombPNG(40000, 40000),
		"https://example.com/cat.png",
		"data:image/png;base64,aGVsbG8=",
		"data:image/png,raw",
		bombPNG(8000, 5000),
	}, DefaultMaxImagePixels)
	if want := []string{ok, "https://example.com/cat.png", bombPNG(8000, 5000)}; !slices.Equal(kept, want) {
		t.Errorf("kept %d images, want the small one, the URL and the 40-megapixel one", len(kept))
	}
	want := []string{
		"image 2 not shown: 40000×40000 pixels, over the 40-megapixel limit for images",
		"image 4 not shown: its size could not be read from it (not a whole png, jpeg, gif or webp image)",
		"image 5 not shown: it is not a base64 data URL",
	}
	if !slices.Equal(notices, want) {
		t.Errorf("notices %q\nwant %q", notices, want)
	}
}

// A message with a bomb runs without it: codex gets the text, a note in place of the image and
// the message's other images; the reply carries the notice for the chat.
func TestSubmitRefusesImageBomb(t *testing.T) {
	w := newFakeWorld()
	s := newSup(t, w, nil)
	defer shutdown(t, s)
	ok := smallPNG(t)
	r, err := s.SubmitInput(context.Background(), "a", Input{Text: "look", Images: []string{bombPNG(20000, 20000), ok}})
	if err != nil {
		t.Fatal(err)
	}
	notice := "image 1 not shown: 20000×20000 pixels, over the 40-megapixel limit for images"
	if !slices.Equal(r.Notices, []string{notice}) {
		t.Errorf("notices %q", r.Notices)
	}
	if got := w.turns(); len(got) != 1 || got[0] != "a:look\n\n["+notice+"]" {
		t.Errorf("codex got %q", got)
	}
	w.mu.Lock()
	images := slices.Clone(w.imageLog)
	w.mu.Unlock()
	if !slices.Equal(images, []string{ok}) {
		t.Errorf("codex got %d images, want only the small one", len(images))
	}
	if got := r.WithNotices("the answer"); !strings.HasSuffix(got, "the answer\n\n["+notice+"]") {
		t.Errorf("WithNotices = %q", got)
	}
}
