package inbound

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"strings"
	"testing"
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

func imgCfg() Config {
	return Config{WorkspaceID: testWS, MaxTextBytes: 1024, MaxImageBytes: 1024, MaxImagesBytes: 1536}
}

// fileRow is a canvas row with a text part and the given file objects as file parts.
func fileRow(t *testing.T, text string, files ...map[string]string) []byte {
	t.Helper()
	parts := []any{map[string]string{"kind": "text", "text": text}}
	for _, f := range files {
		parts = append(parts, map[string]any{"kind": "file", "file": f})
	}
	row, err := json.Marshal(map[string]any{"id": "img-1", "method": "message/send",
		"request_body": map[string]any{"params": map[string]any{"message": map[string]any{"parts": parts}}}})
	if err != nil {
		t.Fatal(err)
	}
	return row
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func TestNormalizeImages(t *testing.T) {
	t.Parallel()
	pngURL := "data:image/png;base64," + b64(pngBytes)
	big := append(append([]byte{}, pngBytes...), bytes.Repeat([]byte{0}, 1100)...)
	half := append(append([]byte{}, pngBytes...), bytes.Repeat([]byte{0}, 900)...)
	tests := []struct {
		name   string
		files  []map[string]string
		images []string
		note   string
	}{
		{
			name:   "inline png becomes an image input",
			files:  []map[string]string{{"name": "dot.png", "mimeType": "image/png", "bytes": b64(pngBytes)}},
			images: []string{pngURL},
			note:   "[attachments: dot.png (image)]",
		},
		{
			name: "mime type with parameters, wrapped url-safe base64 without padding",
			files: []map[string]string{{"name": "dot.png", "mimeType": "Image/PNG; q=1",
				"bytes": strings.TrimRight(base64.URLEncoding.EncodeToString(pngBytes)[:20]+"\n"+base64.URLEncoding.EncodeToString(pngBytes)[20:], "=")}},
			images: []string{pngURL},
			note:   "[attachments: dot.png (image)]",
		},
		{
			name:  "over the per-image cap",
			files: []map[string]string{{"name": "big.png", "mimeType": "image/png", "bytes": b64(big)}},
			note:  fmt.Sprintf("[attachments: big.png (image not shown: %d bytes, over the 1024-byte cap)]", len(big)),
		},
		{
			name:  "far over the cap is refused before decoding",
			files: []map[string]string{{"name": "huge.png", "mimeType": "image/png", "bytes": strings.Repeat("A", 8000)}},
			note:  "[attachments: huge.png (image not shown: 6000 bytes, over the 1024-byte cap)]",
		},
		{
			name: "second image over the message's total cap",
			files: []map[string]string{
				{"name": "a.png", "mimeType": "image/png", "bytes": b64(half)},
				{"name": "b.png", "mimeType": "image/png", "bytes": b64(half)},
			},
			images: []string{"data:image/png;base64," + b64(half)},
			note:   "[attachments: a.png (image), b.png (image not shown: the message's images are over the 1536-byte total cap)]",
		},
		{
			name:  "bad base64",
			files: []map[string]string{{"name": "bad.png", "mimeType": "image/png", "bytes": "!!not base64!!"}},
			note:  "[attachments: bad.png (image not shown: its bytes are not valid base64)]",
		},
		{
			name:  "not an image",
			files: []map[string]string{{"name": "notes.txt", "mimeType": "text/plain", "bytes": b64([]byte("hello"))}},
			note:  "[attachments: notes.txt]",
		},
		{
			name:  "labelled png but the bytes are not",
			files: []map[string]string{{"name": "fake.png", "mimeType": "image/png", "bytes": b64([]byte("GIF89a not really a png"))}},
			note:  "[attachments: fake.png (image not shown: labelled image/png but the bytes are image/gif)]",
		},
		{
			name:  "unsupported image type",
			files: []map[string]string{{"name": "x.svg", "mimeType": "image/svg+xml", "bytes": b64([]byte("<svg/>"))}},
			note:  "[attachments: x.svg (image of type image/svg+xml not shown: only png, jpeg, gif and webp are)]",
		},
		{
			name:  "image by uri is named, not fetched",
			files: []map[string]string{{"name": "remote.png", "mimeType": "image/png", "uri": "https://elsewhere.example/remote.png"}},
			note:  "[attachments: remote.png (image at https://elsewhere.example/remote.png not fetched)]",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := Normalize(fileRow(t, "look", tc.files...), imgCfg())
			if n.Disp != DispMessage {
				t.Fatalf("disp = %v (%s), want message: the row is still answered", n.Disp, n.Reason)
			}
			if want := "look\n\n" + tc.note; n.Msg.Text != want {
				t.Errorf("text = %q\nwant   %q", n.Msg.Text, want)
			}
			if len(n.Msg.Images) != len(tc.images) {
				t.Fatalf("%d images, want %d", len(n.Msg.Images), len(tc.images))
			}
			for i := range tc.images {
				if n.Msg.Images[i] != tc.images[i] {
					t.Errorf("image %d = %.60q…, want %.60q…", i, n.Msg.Images[i], tc.images[i])
				}
			}
		})
	}
}

// An image alone is a message: codex gets the note as text and the image.
func TestNormalizeImageWithoutText(t *testing.T) {
	t.Parallel()
	n := Normalize(fileRow(t, "", map[string]string{"mimeType": "image/png", "bytes": b64(pngBytes)}), imgCfg())
	if n.Disp != DispMessage || len(n.Msg.Images) != 1 || n.Msg.Text != "[attachments: file (image)]" {
		t.Fatalf("got disp %v, %d images, text %q", n.Disp, len(n.Msg.Images), n.Msg.Text)
	}
}
