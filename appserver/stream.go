package appserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// lineStream is the jsonrpc2.ObjectStream over the child's stdio: one JSON object per line.
//
// jsonrpc2.NewPlainObjectStream would do for well-behaved children, but it reads with a
// json.Decoder, which buffers a line of any size and resynchronises on garbage in ways that are
// hard to reason about. Here a line longer than maxLine is a protocol error, a non-JSON line
// ends the stream with an error naming it, and writes to a child that stopped reading fail
// after writeTimeout instead of blocking the caller forever.
type lineStream struct {
	r            *bufio.Reader
	in           *os.File // read end of the child's stdout
	out          *os.File // write end of the child's stdin
	maxLine      int
	writeTimeout time.Duration
	onLine       func()          // called for every line read (liveness)
	onReadEnd    func(err error) // called once, with the error that ended reading
	onWriteErr   func(err error) // called for a write that failed
	// onNotification, when set, takes every plain notification (plainNotification) off the
	// stream on the reading goroutine, in stream order; jsonrpc2 never sees those lines.
	onNotification func(method string, params json.RawMessage)

	wmu  sync.Mutex
	wbuf []byte

	// hold is the pause at a message boundary (Pause); guarded by holdMu.
	holdMu sync.Mutex
	hold   *streamHold

	readEndOnce sync.Once
	closeOnce   sync.Once
	closeErr    error
}

func newLineStream(in, out *os.File, maxLine int, writeTimeout time.Duration) *lineStream {
	return &lineStream{
		r:            bufio.NewReaderSize(in, 64<<10),
		in:           in,
		out:          out,
		maxLine:      maxLine,
		writeTimeout: writeTimeout,
		onLine:       func() {},
		onReadEnd:    func(error) {},
		onWriteErr:   func(error) {},
	}
}

// ReadObject implements jsonrpc2.ObjectStream. It is called only from jsonrpc2's read goroutine.
func (s *lineStream) ReadObject(v any) error {
	for {
		line, err := s.readLine()
		if err != nil {
			s.readEnd(err)
			return err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		s.onLine()
		if s.onNotification != nil {
			if method, params, ok := plainNotification(line); ok {
				s.onNotification(method, params)
				continue
			}
		}
		if err := json.Unmarshal(line, v); err != nil {
			err = fmt.Errorf("%w: line is not a JSON-RPC message (%v): %s", ErrProtocol, err, clip(line, 200))
			s.readEnd(err)
			return err
		}
		return nil
	}
}

func (s *lineStream) readEnd(err error) {
	s.readEndOnce.Do(func() { s.onReadEnd(err) })
}

// readLine returns the next line without its newline. The slice is valid until the next call.
func (s *lineStream) readLine() ([]byte, error) {
	frag, err := s.r.ReadSlice('\n')
	if err == nil {
		// Common case: the whole line fits in the reader's buffer; no copy.
		if len(frag)-1 > s.maxLine {
			return nil, fmt.Errorf("%w: a line of %d bytes exceeds the limit of %d bytes", ErrLineTooLong, len(frag)-1, s.maxLine)
		}
		return frag[:len(frag)-1], nil
	}
	var line []byte
	for {
		if len(line)+len(frag) > s.maxLine {
			// The rest of the line is not read: the stream is broken either way, and reading it
			// could mean buffering gigabytes.
			return nil, fmt.Errorf("%w: a line exceeds the limit of %d bytes", ErrLineTooLong, s.maxLine)
		}
		line = append(line, frag...)
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			frag, err = s.r.ReadSlice('\n')
		case errors.Is(err, os.ErrDeadlineExceeded) && s.holdHere(line):
			// Resumed: go on with the line begun before the pause.
			frag, err = s.r.ReadSlice('\n')
		case errors.Is(err, io.EOF) && len(line) > 0:
			// A last line without newline still counts; the next call reports EOF.
			return line, nil
		default:
			return nil, err
		}
	}
}

// WriteObject implements jsonrpc2.ObjectStream. jsonrpc2 serialises its sends; the mutex keeps
// the stream safe on its own.
func (s *lineStream) WriteObject(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.wbuf = append(append(s.wbuf[:0], data...), '\n')
	if s.writeTimeout > 0 {
		// Pipes from os.Pipe are pollable, so deadlines work. A child that stops reading its
		// stdin for this long is wedged; failing the write frees the caller.
		_ = s.out.SetWriteDeadline(time.Now().Add(s.writeTimeout))
	}
	_, err = s.out.Write(s.wbuf)
	if cap(s.wbuf) > 1<<20 {
		s.wbuf = nil // do not pin a big buffer after one large message
	}
	if err != nil {
		s.onWriteErr(err)
		return err
	}
	return nil
}

// Close implements jsonrpc2.ObjectStream: it closes both pipe ends, which unblocks a pending
// read or write.
func (s *lineStream) Close() error {
	s.closeOnce.Do(func() {
		s.closeErr = errors.Join(s.in.Close(), s.closeStdin())
	})
	return s.closeErr
}

// closeStdin closes the child's stdin: the graceful stop for codex app-server. Safe to call more
// than once.
func (s *lineStream) closeStdin() error {
	err := s.out.Close()
	if errors.Is(err, os.ErrClosed) {
		return nil
	}
	return err
}

// clip returns b as a quoted string of at most n bytes, for error messages.
func clip(b []byte, n int) string {
	if len(b) > n {
		return fmt.Sprintf("%q… (%d bytes)", b[:n], len(b))
	}
	return fmt.Sprintf("%q", b)
}
