package imagehdr

import (
	"bytes"
	"encoding/binary"
	"errors"
	"image"
	"image/color"
	"image/color/palette"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"
	"strings"
	"testing"
)

// pngHeader is a PNG signature and an IHDR declaring w×h: all a bomb needs to declare its size.
func pngHeader(w, h uint32) []byte {
	b := []byte(pngSignature)
	b = binary.BigEndian.AppendUint32(b, 13)
	b = append(b, "IHDR"...)
	b = binary.BigEndian.AppendUint32(b, w)
	b = binary.BigEndian.AppendUint32(b, h)
	b = append(b, 8, 6, 0, 0, 0) // 8-bit RGBA
	return append(b, 0, 0, 0, 0) // CRC, not checked
}

// jpegWith is SOI, an APP1 segment of app bytes, and a baseline SOF0 declaring w×h.
func jpegWith(app int, w, h uint16) []byte {
	b := []byte{0xFF, 0xD8, 0xFF, 0xE1}
	b = binary.BigEndian.AppendUint16(b, uint16(app+2))
	b = append(b, make([]byte, app)...)
	b = append(b, 0xFF, 0xFF, 0xC0, 0, 17, 8) // a fill byte, SOF0, length, precision
	b = binary.BigEndian.AppendUint16(b, h)
	b = binary.BigEndian.AppendUint16(b, w)
	return append(b, 3, 1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1)
}

func riff(chunks ...[]byte) []byte {
	body := []byte("WEBP")
	for _, c := range chunks {
		body = append(body, c...)
	}
	b := append([]byte("RIFF"), binary.LittleEndian.AppendUint32(nil, uint32(len(body)))...)
	return append(b, body...)
}

func chunk(fourcc string, body []byte) []byte {
	b := append([]byte(fourcc), binary.LittleEndian.AppendUint32(nil, uint32(len(body)))...)
	b = append(b, body...)
	if len(body)%2 == 1 {
		b = append(b, 0)
	}
	return b
}

func vp8L(w, h int) []byte {
	bits := uint32(w-1) | uint32(h-1)<<14
	return chunk("VP8L", append([]byte{0x2F}, binary.LittleEndian.AppendUint32(nil, bits)...))
}

func vp8(w, h uint16) []byte {
	b := []byte{0x10, 0x02, 0x00, 0x9D, 0x01, 0x2A}   // key frame tag, start code
	b = binary.LittleEndian.AppendUint16(b, w|0x4000) // a scale hint in the top bits
	b = binary.LittleEndian.AppendUint16(b, h)
	return chunk("VP8 ", append(b, make([]byte, 7)...))
}

func u24(v int) []byte { return []byte{byte(v), byte(v >> 8), byte(v >> 16)} }

func vp8X(w, h int) []byte {
	b := []byte{0x02, 0, 0, 0} // animation flag
	b = append(b, u24(w-1)...)
	return chunk("VP8X", append(b, u24(h-1)...))
}

func anmf(x, y, w, h int, frame []byte) []byte {
	b := append(u24(x/2), u24(y/2)...)
	b = append(b, u24(w-1)...)
	b = append(b, u24(h-1)...)
	b = append(b, 0, 0, 0, 0)
	return chunk("ANMF", append(b, frame...))
}

func encoded(t *testing.T, enc func(io.Writer, image.Image) error, w, h int) []byte {
	t.Helper()
	var b bytes.Buffer
	img := image.NewPaletted(image.Rect(0, 0, w, h), palette.Plan9)
	img.Set(w-1, h-1, color.White)
	if err := enc(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestReadSizes(t *testing.T) {
	gifFrames := func(*testing.T) []byte {
		// A 10×10 screen whose second frame lies at (5,5) with 20×30 pixels: decoders allocate it.
		b := []byte("GIF89a\x0a\x00\x0a\x00\x00\x00\x00")
		for _, d := range [][4]uint16{{0, 0, 10, 10}, {5, 5, 20, 30}} {
			b = append(b, 0x2C)
			for _, v := range d {
				b = binary.LittleEndian.AppendUint16(b, v)
			}
			b = append(b, 0, 2, 1, 0x44, 0) // no local table; LZW code size; one sub-block
		}
		return append(b, 0x3B)
	}
	for _, tc := range []struct {
		name string
		data func(*testing.T) []byte
		want Header
	}{
		{"png encoded", func(t *testing.T) []byte { return encoded(t, png.Encode, 7, 3) }, Header{PNG, 7, 3}},
		{"png bomb header", func(*testing.T) []byte { return pngHeader(40000, 40000) }, Header{PNG, 40000, 40000}},
		{"jpeg encoded", func(t *testing.T) []byte {
			return encoded(t, func(w io.Writer, m image.Image) error { return jpeg.Encode(w, m, nil) }, 33, 17)
		}, Header{JPEG, 33, 17}},
		{"jpeg SOF after a 60 KB APP1", func(*testing.T) []byte { return jpegWith(60000, 65535, 65535) }, Header{JPEG, 65535, 65535}},
		{"gif encoded", func(t *testing.T) []byte {
			return encoded(t, func(w io.Writer, m image.Image) error { return gif.Encode(w, m, nil) }, 9, 4)
		}, Header{GIF, 9, 4}},
		{"gif frame beyond the screen", gifFrames, Header{GIF, 25, 35}},
		{"webp VP8L", func(*testing.T) []byte { return riff(vp8L(16384, 2)) }, Header{WebP, 16384, 2}},
		{"webp VP8", func(*testing.T) []byte { return riff(vp8(16383, 300)) }, Header{WebP, 16383, 300}},
		{"webp VP8X", func(*testing.T) []byte { return riff(vp8X(16777216, 3), vp8L(4, 3)) }, Header{WebP, 16777216, 3}},
		{"webp VP8X with a frame beyond the canvas", func(*testing.T) []byte {
			return riff(vp8X(10, 10), chunk("ANIM", make([]byte, 6)), anmf(4, 2, 8, 9, vp8L(8, 9)), anmf(0, 0, 5, 5, vp8(30, 40)))
		}, Header{WebP, 30, 40}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := Read(bytes.NewReader(tc.data(t)))
			if err != nil || h != tc.want {
				t.Fatalf("Read = %+v, %v; want %+v", h, err, tc.want)
			}
		})
	}
}

// Read agrees with the standard library's DecodeConfig on what both read, and never reads pixels.
func TestReadAgreesWithDecodeConfig(t *testing.T) {
	for _, data := range [][]byte{
		encoded(t, png.Encode, 120, 80),
		encoded(t, func(w io.Writer, m image.Image) error { return jpeg.Encode(w, m, nil) }, 64, 48),
		encoded(t, func(w io.Writer, m image.Image) error { return gif.Encode(w, m, nil) }, 5, 6),
	} {
		cfg, _, err := image.DecodeConfig(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		h, err := Read(bytes.NewReader(data))
		if err != nil || h.Width != cfg.Width || h.Height != cfg.Height {
			t.Errorf("%s: Read = %+v, %v; DecodeConfig %d×%d", h.Format, h, err, cfg.Width, cfg.Height)
		}
	}
}

func TestReadRefuses(t *testing.T) {
	full := pngHeader(10, 10)
	for _, tc := range []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, ErrUnknownFormat},
		{"text", []byte("hello, this is not an image"), ErrUnknownFormat},
		{"bmp", append([]byte("BM"), make([]byte, 60)...), ErrUnknownFormat},
		{"png truncated in IHDR", full[:20], ErrMalformed},
		{"png without IHDR first", append(full[:12:12], append([]byte("IDAT"), full[16:]...)...), ErrMalformed},
		{"png of zero width", pngHeader(0, 10), ErrMalformed},
		{"png over 2^31", pngHeader(1<<31, 1), ErrMalformed},
		{"jpeg truncated before SOF", jpegWith(100, 10, 10)[:50], ErrMalformed},
		{"jpeg scan before SOF", []byte{0xFF, 0xD8, 0xFF, 0xDA, 0, 2}, ErrMalformed},
		{"jpeg height from DNL", jpegWith(0, 10, 0), ErrMalformed},
		{"jpeg garbage after SOI", []byte{0xFF, 0xD8, 0xFF, 0xE0, 0, 4, 1, 2, 0x42}, ErrMalformed},
		{"gif truncated", []byte("GIF89a\x0a\x00"), ErrMalformed},
		{"gif without an image", []byte("GIF89a\x0a\x00\x0a\x00\x00\x00\x00\x3b"), ErrMalformed},
		{"gif unknown block", []byte("GIF89a\x0a\x00\x0a\x00\x00\x00\x00\x99"), ErrMalformed},
		{"webp without a bitstream", riff(chunk("EXIF", []byte("x"))), ErrMalformed},
		{"webp VP8 not a key frame", riff(append(vp8(10, 10)[:8:8], append([]byte{0x11}, vp8(10, 10)[9:]...)...)), ErrMalformed},
		{"webp VP8L bad signature", riff(chunk("VP8L", []byte{0x2E, 0, 0, 0, 0})), ErrMalformed},
		{"webp VP8X truncated", riff(vp8X(10, 10))[:20], ErrMalformed},
		{"webp ANMF running past itself", riff(vp8X(10, 10), anmf(0, 0, 10, 10, chunk("VP8L", make([]byte, 400)))[:30]), ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := Read(bytes.NewReader(tc.data))
			if !errors.Is(err, tc.want) {
				t.Fatalf("Read = %+v, %v; want %v", h, err, tc.want)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	if _, err := Check(bytes.NewReader(pngHeader(8000, 5000)), 40_000_000); err != nil {
		t.Fatalf("40 megapixels under a 40-megapixel budget: %v", err)
	}
	_, err := Check(bytes.NewReader(pngHeader(40000, 40000)), 40_000_000)
	var ob *OverBudgetError
	if !errors.As(err, &ob) || ob.Header != (Header{PNG, 40000, 40000}) {
		t.Fatalf("bomb: %v, want an *OverBudgetError", err)
	}
	if want := "png image of 40000×40000 pixels (1600.0 megapixels) is over the 40.0-megapixel limit"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}

// A bomb is judged from its first bytes: Read stops at the header and never touches the rest.
func TestReadStopsAtTheHeader(t *testing.T) {
	r := io.MultiReader(bytes.NewReader(pngHeader(40000, 40000)), failingReader{})
	if _, err := Read(r); err != nil {
		t.Fatalf("Read read past the header: %v", err)
	}
	allocs := testing.AllocsPerRun(20, func() {
		_, _ = Read(strings.NewReader(string(pngHeader(40000, 40000))))
	})
	if allocs > 8 {
		t.Errorf("%v allocations to read a header", allocs)
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("read past the header") }

func FuzzRead(f *testing.F) {
	f.Add(pngHeader(40000, 40000))
	f.Add(jpegWith(10, 100, 100))
	f.Add([]byte("GIF89a\x0a\x00\x0a\x00\x00\x00\x00\x2c\x00\x00\x00\x00\x05\x00\x05\x00\x00\x02\x00\x3b"))
	f.Add(riff(vp8L(20, 20)))
	f.Add(riff(vp8(20, 20)))
	f.Add(riff(vp8X(10, 10), anmf(0, 0, 5, 5, vp8(30, 40))))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := Read(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrUnknownFormat) && !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is neither ErrUnknownFormat nor ErrMalformed", err)
			}
			return
		}
		if h.Width <= 0 || h.Height <= 0 || h.Format == "" {
			t.Fatalf("Read = %+v without an error", h)
		}
		if h.Format == PNG {
			if cfg, err := png.DecodeConfig(bytes.NewReader(data)); err == nil && (cfg.Width != h.Width || cfg.Height != h.Height) {
				t.Fatalf("png: Read %d×%d, DecodeConfig %d×%d", h.Width, h.Height, cfg.Width, cfg.Height)
			}
		}
	})
}
