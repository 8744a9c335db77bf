// Package imagehdr reads the pixel dimensions of a PNG, JPEG, GIF or WebP image from its
// headers, without decoding any pixel data, and checks them against a pixel budget.
//
// It exists because codex decodes every inline image it is given into a full bitmap before it
// scales it down: a few kilobytes of compressed image declaring 40000×40000 pixels cost gigabytes
// of memory in the child. The header tells the cost before anyone pays it.
//
// Read consumes the image from an io.Reader and keeps only a fixed-size buffer: segments, chunks
// and sub-blocks it does not need are skipped, not stored. Anything it cannot read as one of the
// four formats (an unknown signature, a truncated or inconsistent header, a size of zero) is an
// error: an image whose size is unknown is not shown.
package imagehdr

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Format names an image format.
type Format string

// The formats Read knows.
const (
	PNG  Format = "png"
	JPEG Format = "jpeg"
	GIF  Format = "gif"
	WebP Format = "webp"
)

// Header is what Read learned about an image.
type Header struct {
	Format Format
	// Width and Height are the largest extent a decoder must allocate for: for GIF and for WebP
	// with frames, the logical screen or canvas grown to hold every frame.
	Width, Height int
}

// Pixels is Width×Height.
func (h Header) Pixels() int64 { return int64(h.Width) * int64(h.Height) }

// Errors of Read. Match them with errors.Is.
var (
	// ErrUnknownFormat: the bytes do not start like a PNG, JPEG, GIF or WebP image.
	ErrUnknownFormat = errors.New("not a png, jpeg, gif or webp image")
	// ErrMalformed: the bytes start like an image of a known format, but its header is truncated
	// or inconsistent, or declares no size.
	ErrMalformed = errors.New("image header malformed")
)

// Read reads the header of the image in r. It reads as far as it must and no further: for PNG
// and most WebP the first few dozen bytes, for JPEG up to the frame header, for GIF and
// animated WebP every frame header.
func Read(r io.Reader) (Header, error) {
	br := bufio.NewReaderSize(r, 64)
	sig, err := br.Peek(12)
	if err != nil && len(sig) < 3 {
		return Header{}, ErrUnknownFormat
	}
	var h Header
	switch {
	case len(sig) >= 8 && string(sig[:8]) == pngSignature:
		h, err = readPNG(br)
	case sig[0] == 0xFF && sig[1] == 0xD8 && sig[2] == 0xFF:
		h, err = readJPEG(br)
	case len(sig) >= 6 && (string(sig[:6]) == "GIF87a" || string(sig[:6]) == "GIF89a"):
		h, err = readGIF(br)
	case len(sig) >= 12 && string(sig[:4]) == "RIFF" && string(sig[8:12]) == "WEBP":
		h, err = readWebP(br)
	default:
		return Header{}, ErrUnknownFormat
	}
	if err != nil {
		return Header{}, err
	}
	if h.Width <= 0 || h.Height <= 0 {
		return Header{}, fmt.Errorf("%w: %s declares %d×%d pixels", ErrMalformed, h.Format, h.Width, h.Height)
	}
	return h, nil
}

// OverBudgetError is Check's error for an image with more pixels than the budget.
type OverBudgetError struct {
	Header    Header
	MaxPixels int64
}

func (e *OverBudgetError) Error() string {
	return fmt.Sprintf("%s image of %d×%d pixels (%.1f megapixels) is over the %.1f-megapixel limit",
		e.Header.Format, e.Header.Width, e.Header.Height, float64(e.Header.Pixels())/1e6, float64(e.MaxPixels)/1e6)
}

// Check reads the header of the image in r (Read) and refuses it with an *OverBudgetError when
// it has more than maxPixels pixels.
func Check(r io.Reader, maxPixels int64) (Header, error) {
	h, err := Read(r)
	if err != nil {
		return Header{}, err
	}
	if h.Pixels() > maxPixels {
		return h, &OverBudgetError{Header: h, MaxPixels: maxPixels}
	}
	return h, nil
}

// malformed wraps a read error: running out of bytes inside a header is a malformed image.
func malformed(f Format, what string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: %s: truncated %s", ErrMalformed, f, what)
	}
	if err != nil && !errors.Is(err, ErrMalformed) {
		return fmt.Errorf("%s: reading %s: %w", f, what, err)
	}
	return err
}

// readFull reads exactly len(buf) bytes.
func readFull(br *bufio.Reader, buf []byte) error {
	_, err := io.ReadFull(br, buf)
	return err
}

// skip discards n bytes; fewer is a truncated image.
func skip(br *bufio.Reader, n int64) error {
	for n > 0 {
		step := min(n, 1<<30)
		d, err := br.Discard(int(step))
		n -= int64(d)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

const pngSignature = "\x89PNG\r\n\x1a\n"

// readPNG reads the IHDR chunk, which the format requires to come first.
func readPNG(br *bufio.Reader) (Header, error) {
	var b [8 + 8 + 13]byte
	if err := readFull(br, b[:]); err != nil {
		return Header{}, malformed(PNG, "IHDR", err)
	}
	if binary.BigEndian.Uint32(b[8:12]) != 13 || string(b[12:16]) != "IHDR" {
		return Header{}, fmt.Errorf("%w: png: the first chunk is not a 13-byte IHDR", ErrMalformed)
	}
	w, h := binary.BigEndian.Uint32(b[16:20]), binary.BigEndian.Uint32(b[20:24])
	if w > 1<<31-1 || h > 1<<31-1 {
		return Header{}, fmt.Errorf("%w: png: size %d×%d out of range", ErrMalformed, w, h)
	}
	return Header{Format: PNG, Width: int(w), Height: int(h)}, nil
}

// readJPEG walks the markers after SOI to the first frame header (SOFn). A scan (SOS) or the end
// (EOI) before it means the image has no size to read.
func readJPEG(br *bufio.Reader) (Header, error) {
	if err := skip(br, 2); err != nil { // SOI
		return Header{}, malformed(JPEG, "SOI", err)
	}
	for {
		c, err := br.ReadByte()
		if err != nil {
			return Header{}, malformed(JPEG, "marker", err)
		}
		if c != 0xFF {
			return Header{}, fmt.Errorf("%w: jpeg: 0x%02x where a marker belongs", ErrMalformed, c)
		}
		marker := byte(0xFF)
		for marker == 0xFF { // fill bytes
			if marker, err = br.ReadByte(); err != nil {
				return Header{}, malformed(JPEG, "marker", err)
			}
		}
		switch {
		case marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7):
			continue // TEM, RSTn: no length
		case marker == 0xD8 || marker == 0xD9 || marker == 0xDA:
			return Header{}, fmt.Errorf("%w: jpeg: marker 0x%02x before any frame header", ErrMalformed, marker)
		}
		var lb [2]byte
		if err := readFull(br, lb[:]); err != nil {
			return Header{}, malformed(JPEG, "segment length", err)
		}
		n := int64(binary.BigEndian.Uint16(lb[:]))
		if n < 2 {
			return Header{}, fmt.Errorf("%w: jpeg: segment 0x%02x of length %d", ErrMalformed, marker, n)
		}
		if isSOF(marker) {
			var f [5]byte // precision, height, width
			if n < 2+6 {
				return Header{}, fmt.Errorf("%w: jpeg: frame header of length %d", ErrMalformed, n)
			}
			if err := readFull(br, f[:]); err != nil {
				return Header{}, malformed(JPEG, "frame header", err)
			}
			// A height of 0 is defined later by a DNL marker, after the first scan: not known
			// from the header, so refused by Read.
			return Header{Format: JPEG, Width: int(binary.BigEndian.Uint16(f[3:5])), Height: int(binary.BigEndian.Uint16(f[1:3]))}, nil
		}
		if err := skip(br, n-2); err != nil {
			return Header{}, malformed(JPEG, "segment", err)
		}
	}
}

// isSOF reports the start-of-frame markers: C0–CF except DHT (C4), JPG (C8) and DAC (CC).
func isSOF(m byte) bool {
	return m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC
}

// readGIF reads the logical screen and walks every block to the trailer, growing the size to
// hold every frame: decoders allocate a frame's own rectangle, which may lie beyond the screen.
func readGIF(br *bufio.Reader) (Header, error) {
	var lsd [13]byte
	if err := readFull(br, lsd[:]); err != nil {
		return Header{}, malformed(GIF, "logical screen descriptor", err)
	}
	h := Header{Format: GIF, Width: int(binary.LittleEndian.Uint16(lsd[6:8])), Height: int(binary.LittleEndian.Uint16(lsd[8:10]))}
	if lsd[10]&0x80 != 0 {
		if err := skip(br, 3<<(lsd[10]&7+1)); err != nil {
			return Header{}, malformed(GIF, "global color table", err)
		}
	}
	frames := 0
	for {
		c, err := br.ReadByte()
		if err != nil {
			if frames > 0 && errors.Is(err, io.EOF) {
				return h, nil // no trailer: decoders take the frames read
			}
			return Header{}, malformed(GIF, "block", err)
		}
		switch c {
		case 0x3B: // trailer
			if frames == 0 {
				return Header{}, fmt.Errorf("%w: gif: no image", ErrMalformed)
			}
			return h, nil
		case 0x21: // extension: label, then sub-blocks
			if _, err := br.ReadByte(); err != nil {
				return Header{}, malformed(GIF, "extension", err)
			}
			if err := skipSubBlocks(br); err != nil {
				return Header{}, malformed(GIF, "extension", err)
			}
		case 0x2C: // image descriptor
			var d [9]byte
			if err := readFull(br, d[:]); err != nil {
				return Header{}, malformed(GIF, "image descriptor", err)
			}
			left, top := int(binary.LittleEndian.Uint16(d[0:2])), int(binary.LittleEndian.Uint16(d[2:4]))
			w, ht := int(binary.LittleEndian.Uint16(d[4:6])), int(binary.LittleEndian.Uint16(d[6:8]))
			h.Width, h.Height = max(h.Width, left+w), max(h.Height, top+ht)
			if d[8]&0x80 != 0 {
				if err := skip(br, 3<<(d[8]&7+1)); err != nil {
					return Header{}, malformed(GIF, "local color table", err)
				}
			}
			if _, err := br.ReadByte(); err != nil { // LZW minimum code size
				return Header{}, malformed(GIF, "image data", err)
			}
			if err := skipSubBlocks(br); err != nil {
				return Header{}, malformed(GIF, "image data", err)
			}
			frames++
		default:
			return Header{}, fmt.Errorf("%w: gif: block 0x%02x", ErrMalformed, c)
		}
	}
}

// skipSubBlocks skips data sub-blocks up to the terminating empty one.
func skipSubBlocks(br *bufio.Reader) error {
	for {
		n, err := br.ReadByte()
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if err := skip(br, int64(n)); err != nil {
			return err
		}
	}
}

// readWebP walks the RIFF chunks. A simple file is one VP8 (lossy) or VP8L (lossless) chunk; an
// extended one starts with VP8X, which gives the canvas, and may hold animation frames (ANMF),
// each with a position and a bitstream of its own. The size is the largest of them all.
func readWebP(br *bufio.Reader) (Header, error) {
	var riff [12]byte
	if err := readFull(br, riff[:]); err != nil {
		return Header{}, malformed(WebP, "RIFF header", err)
	}
	left := int64(binary.LittleEndian.Uint32(riff[4:8])) - 4 // after "WEBP"
	h := Header{Format: WebP}
	sized := false
	for left >= 8 {
		var ch [8]byte
		if err := readFull(br, ch[:]); err != nil {
			if sized && errors.Is(err, io.EOF) {
				break // a RIFF size larger than the file: decoders stop at the end
			}
			return Header{}, malformed(WebP, "chunk header", err)
		}
		fourcc, n := string(ch[:4]), int64(binary.LittleEndian.Uint32(ch[4:8]))
		body := n + n&1 // chunks are padded to an even size
		left -= 8 + body
		var w, ht int
		var used int64 // of body, by the size reader
		var err error
		switch fourcc {
		case "VP8 ", "VP8L":
			w, ht, used, err = readBitstream(br, fourcc, n)
		case "VP8X":
			w, ht, err = readVP8X(br, n)
			used = 10
		case "ANMF":
			w, ht, err = readANMF(br, n)
			used = n
		default:
			w, ht = -1, -1 // no size in it
		}
		if err != nil {
			return Header{}, malformed(WebP, fourcc+" chunk", err)
		}
		if w >= 0 {
			h.Width, h.Height, sized = max(h.Width, w), max(h.Height, ht), true
		}
		if err := skip(br, body-used); err != nil {
			if sized && errors.Is(err, io.ErrUnexpectedEOF) {
				// Cut short in pixel data: every size the file holds was read. Decoding it is
				// the decoder's problem, not a size question.
				break
			}
			return Header{}, malformed(WebP, fourcc+" chunk", err)
		}
	}
	if !sized {
		return Header{}, fmt.Errorf("%w: webp: no VP8, VP8L or VP8X chunk", ErrMalformed)
	}
	return h, nil
}

// readBitstream reads the size from the start of a VP8 or VP8L bitstream of n bytes; used is
// how many of them it read.
func readBitstream(br *bufio.Reader, fourcc string, n int64) (w, h int, used int64, err error) {
	if fourcc == "VP8L" {
		var b [5]byte
		if n < 5 {
			return 0, 0, 0, fmt.Errorf("%w: webp: VP8L chunk of %d bytes", ErrMalformed, n)
		}
		if err := readFull(br, b[:]); err != nil {
			return 0, 0, 0, err
		}
		if b[0] != 0x2F {
			return 0, 0, 0, fmt.Errorf("%w: webp: VP8L signature 0x%02x", ErrMalformed, b[0])
		}
		bits := binary.LittleEndian.Uint32(b[1:5])
		if bits>>29 != 0 {
			return 0, 0, 0, fmt.Errorf("%w: webp: VP8L version %d", ErrMalformed, bits>>29)
		}
		return int(bits&0x3FFF) + 1, int(bits>>14&0x3FFF) + 1, 5, nil
	}
	var b [10]byte
	if n < 10 {
		return 0, 0, 0, fmt.Errorf("%w: webp: VP8 chunk of %d bytes", ErrMalformed, n)
	}
	if err := readFull(br, b[:]); err != nil {
		return 0, 0, 0, err
	}
	if b[0]&1 != 0 || b[3] != 0x9D || b[4] != 0x01 || b[5] != 0x2A {
		return 0, 0, 0, fmt.Errorf("%w: webp: VP8 data is not a key frame", ErrMalformed)
	}
	// The top two bits are an upscaling hint for the display, not the decoded size.
	return int(binary.LittleEndian.Uint16(b[6:8]) & 0x3FFF), int(binary.LittleEndian.Uint16(b[8:10]) & 0x3FFF), 10, nil
}

// readVP8X reads the canvas size of an extended WebP.
func readVP8X(br *bufio.Reader, n int64) (w, h int, err error) {
	var b [10]byte
	if n < 10 {
		return 0, 0, fmt.Errorf("%w: webp: VP8X chunk of %d bytes", ErrMalformed, n)
	}
	if err := readFull(br, b[:]); err != nil {
		return 0, 0, err
	}
	return int(uint24(b[4:7])) + 1, int(uint24(b[7:10])) + 1, nil
}

// readANMF reads an animation frame of n bytes: its position and size, and the bitstream in it.
func readANMF(br *bufio.Reader, n int64) (w, h int, err error) {
	var b [16]byte
	if n < 16 {
		return 0, 0, fmt.Errorf("%w: webp: ANMF chunk of %d bytes", ErrMalformed, n)
	}
	if err := readFull(br, b[:]); err != nil {
		return 0, 0, err
	}
	// Offsets are stored halved.
	x, y := 2*int(uint24(b[0:3])), 2*int(uint24(b[3:6]))
	w, h = x+int(uint24(b[6:9]))+1, y+int(uint24(b[9:12]))+1
	left := n - 16
	for left >= 8 {
		var ch [8]byte
		if err := readFull(br, ch[:]); err != nil {
			return 0, 0, err
		}
		fourcc, cn := string(ch[:4]), int64(binary.LittleEndian.Uint32(ch[4:8]))
		body := cn + cn&1
		left -= 8 + body
		if left < 0 {
			return 0, 0, fmt.Errorf("%w: webp: a chunk runs past its ANMF frame", ErrMalformed)
		}
		if fourcc == "VP8 " || fourcc == "VP8L" {
			bw, bh, used, err := readBitstream(br, fourcc, cn)
			if err != nil {
				return 0, 0, err
			}
			w, h = max(w, x+bw), max(h, y+bh)
			body -= used
		}
		if err := skip(br, body); err != nil {
			return 0, 0, err
		}
	}
	return w, h, skip(br, max(left, 0))
}

func uint24(b []byte) uint32 { return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 }
