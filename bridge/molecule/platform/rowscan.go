package platform

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
)

// rowScanner reads a JSON array of activity rows from a stream one element at a time, holding at
// most one row (up to its cap) in memory. It tracks only strings, escapes and bracket depth, so
// no row's content or nesting can make it fail: a row that is not valid JSON is handed on as it
// is and judged poison by normalize, and the rows beside it are read on. A row longer than the
// cap is streamed past without being held; its top-level "id" member is still read (also when
// it comes after the large value), so the row can be judged poison by its id.
//
// encoding/json and jsontext both need a whole token in memory (a 100 MB string would cost
// 100 MB) and give up on a whole stream past a nesting limit, so neither fits here.
type rowScanner struct {
	r      io.Reader
	buf    []byte
	pos    int
	end    int
	rerr   error // the error the last read returned, handed out once buf is used up
	maxRow int
	state  int // scanBefore, scanRows, scanDone
	n      int // elements returned so far
}

const (
	scanBefore = iota // the opening bracket is not read yet
	scanRows
	scanDone
)

// scanBufSize is the read buffer; rows are copied out of it.
const scanBufSize = 64 << 10

// Bounds of what the scanner keeps of a row's top-level keys and of its "id" value, which it
// reads also from rows it does not keep. A longer key cannot be "id"; a longer value is no
// usable id.
const (
	maxScanKey = 64
	maxScanID  = 1024
)

// errNotArray means the activity response is not a JSON array.
var errNotArray = errors.New("activity response is not a JSON array")

// Row is one element of the activity array.
type Row struct {
	// Raw is the element's text, or nil when it is longer than the row cap (oversized).
	Raw []byte
	// ID is the element's top-level "ID" member when the element is an object and the member
	// is a non-empty string or a number; "" otherwise.
	ID string
	// Size is the element's length in bytes.
	Size int64
	// sum is the SHA-256 of an oversized element (fingerprint uses it), nil otherwise.
	sum []byte
}

// oversized reports a row that was longer than the cap and was not kept.
func (r Row) Oversized() bool { return r.Raw == nil }

// fingerprint names a row by its content, for rows without an id.
func (r Row) Fingerprint() string {
	if r.sum != nil {
		return "sha256:" + hex.EncodeToString(r.sum)
	}
	s := sha256.Sum256(r.Raw)
	return "sha256:" + hex.EncodeToString(s[:])
}

func newRowScanner(r io.Reader, maxRow int) *rowScanner {
	return &rowScanner{r: r, buf: make([]byte, scanBufSize), maxRow: maxRow}
}

// fill reads more input. It returns false when there is none: the input ended (io.EOF) or the
// reader failed; the reason is in s.rerr.
func (s *rowScanner) fill() bool {
	for s.pos == s.end {
		if s.rerr != nil {
			return false
		}
		n, err := s.r.Read(s.buf)
		s.pos, s.end, s.rerr = 0, n, err
		if n == 0 && err == nil {
			continue
		}
	}
	return true
}

// inputErr explains why the input stopped in the middle of the array.
func (s *rowScanner) inputErr() error {
	if s.rerr == nil || errors.Is(s.rerr, io.EOF) {
		return fmt.Errorf("%w: it ends before the array does (%d rows read)", errNotArray, s.n)
	}
	return fmt.Errorf("read activity response after %d rows: %w", s.n, s.rerr)
}

// next returns the next element of the array; ok is false after the last one. An error means the
// input is not an array or stopped before the array did; elements returned before it were
// complete.
func (s *rowScanner) next() (row Row, ok bool, err error) {
	if s.state == scanBefore {
		c, ok := s.skipSpace()
		if !ok {
			if s.rerr != nil && !errors.Is(s.rerr, io.EOF) {
				return Row{}, false, fmt.Errorf("read activity response: %w", s.rerr)
			}
			return Row{}, false, fmt.Errorf("%w: the response is empty", errNotArray)
		}
		if c != '[' {
			return Row{}, false, fmt.Errorf("%w: it starts with %q", errNotArray, c)
		}
		s.pos++
		s.state = scanRows
	}
	for s.state == scanRows {
		c, ok := s.skipSpace()
		switch {
		case !ok:
			return Row{}, false, s.inputErr()
		case c == ']':
			s.pos++
			s.state = scanDone
		case c == ',':
			// A separator, or an empty element (`[,`): nothing to hand on.
			s.pos++
		default:
			row, err := s.element()
			if err != nil {
				return Row{}, false, err
			}
			s.n++
			return row, true, nil
		}
	}
	return Row{}, false, nil
}

// skipSpace moves past JSON white space and returns the next byte without consuming it.
func (s *rowScanner) skipSpace() (byte, bool) {
	for {
		if s.pos == s.end && !s.fill() {
			return 0, false
		}
		if c := s.buf[s.pos]; !isJSONSpace(c) {
			return c, true
		}
		s.pos++
	}
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// Where an element's top-level member reading is (objects only).
const (
	memberNone      = iota // not inside the element's top-level object
	memberWantKey          // before a key (after '{' or ',')
	memberKey              // inside a key string
	memberWantColon        // after a key
	memberValue            // inside a member's value
)

// element is the state of the element being read.
type element struct {
	maxRow int
	raw    []byte
	size   int64
	sum    hash.Hash // set once the element is over the cap: raw is let go

	depth    int
	inString bool
	escaped  bool
	started  bool

	member  int
	key     []byte // the current top-level key as written, while short
	keyLong bool
	isID    bool   // the current member is "id"
	idRaw   []byte // its value as written, while short
	idLong  bool
	id      string
}

// element reads one element: up to the ',' or ']' at depth 0 outside strings, which is left
// unread.
func (s *rowScanner) element() (Row, error) {
	e := element{maxRow: s.maxRow}
	for {
		if s.pos == s.end && !s.fill() {
			return Row{}, s.inputErr()
		}
		chunk := s.buf[s.pos:s.end]
		if e.inString && !e.escaped {
			// The bulk of a large row is string content: take it in one piece up to the next
			// quote or backslash.
			n := bytes.IndexByte(chunk, '"')
			if n < 0 {
				n = len(chunk)
			}
			if b := bytes.IndexByte(chunk[:n], '\\'); b >= 0 {
				n = b
			}
			if n > 0 {
				e.take(chunk[:n])
				s.pos += n
				continue
			}
		}
		c := chunk[0]
		if !e.inString && e.depth == 0 && (c == ',' || c == ']') {
			return e.row(), nil
		}
		s.pos++
		e.step(c, chunk[:1])
	}
}

// step handles one byte outside the string fast path.
func (e *element) step(c byte, b []byte) {
	if e.inString {
		e.take(b)
		switch {
		case e.escaped:
			e.escaped = false
		case c == '\\':
			e.escaped = true
		case c == '"':
			e.inString = false
			if e.member == memberKey {
				e.member = memberWantColon
			}
		}
		return
	}
	if !e.started && isJSONSpace(c) {
		return
	}
	first := !e.started
	e.started = true
	switch c {
	case '"':
		if e.depth == 1 && e.member == memberWantKey {
			e.member, e.key, e.keyLong = memberKey, e.key[:0], false
		}
		e.inString = true
	case '{', '[':
		e.depth++
		if first && c == '{' {
			e.member = memberWantKey
		}
	case '}', ']':
		if e.depth == 1 && e.member != memberNone {
			e.endValue()
			e.member = memberNone
		}
		if e.depth > 0 {
			e.depth--
		}
	case ',':
		if e.depth == 1 && e.member != memberNone {
			e.endValue()
			e.member = memberWantKey
		}
	case ':':
		if e.depth == 1 && e.member == memberWantColon {
			e.take(b)
			e.member = memberValue
			e.isID = !e.keyLong && keyIsID(e.key)
			e.idRaw, e.idLong = e.idRaw[:0], false
			return
		}
	}
	e.take(b)
}

// take appends b to the element until it is over the cap (from then on it is only hashed, so a
// row without an id can still be told apart), and to the current top-level key or id value when
// one is being read.
func (e *element) take(b []byte) {
	e.size += int64(len(b))
	switch {
	case e.sum != nil:
		e.sum.Write(b)
	case len(e.raw)+len(b) > e.maxRow:
		e.sum = sha256.New()
		e.sum.Write(e.raw)
		e.sum.Write(b)
		e.raw = nil
	default:
		e.raw = append(e.raw, b...)
	}
	switch {
	case e.member == memberKey && !e.keyLong:
		if e.keyLong = len(e.key)+len(b) > maxScanKey; !e.keyLong {
			e.key = append(e.key, b...)
		}
	case e.member == memberValue && e.isID && !e.idLong:
		if e.idLong = len(e.idRaw)+len(b) > maxScanID; !e.idLong {
			e.idRaw = append(e.idRaw, b...)
		}
	}
}

// endValue ends a top-level member: a complete "id" value becomes the element's id (the last one
// wins, as with encoding/json).
func (e *element) endValue() {
	if e.member != memberValue || !e.isID {
		return
	}
	e.isID = false
	if e.idLong {
		e.id = ""
		return
	}
	e.id, _ = RawID(e.idRaw)
}

func (e *element) row() Row {
	r := Row{ID: e.id, Size: e.size}
	if e.sum != nil {
		r.sum = e.sum.Sum(nil)
		return r
	}
	r.Raw = bytes.TrimRight(e.raw, " \t\r\n")
	if r.Raw == nil {
		r.Raw = []byte{}
	}
	return r
}

// keyIsID reports whether key, a JSON string as written, is "id".
func keyIsID(key []byte) bool {
	if string(key) == `"id"` {
		return true
	}
	if bytes.IndexByte(key, '\\') < 0 {
		return false
	}
	var k string
	return json.Unmarshal(key, &k) == nil && k == "id"
}

// RawID is a row's id as the scanner and normalize read it: it accepts a non-empty string or a number (kept as written): Molecule ids are opaque.
func RawID(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	var s string
	if len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil && s != "" {
		return s, true
	}
	if len(raw) == 0 {
		return "", false
	}
	var num json.Number
	if json.Unmarshal(raw, &num) == nil && num != "" {
		return num.String(), true
	}
	return "", false
}
