package local

import (
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// DefaultMaxConns bounds the local inbox's open connections. Each waiting caller holds one for
// the length of its turn, so this is also the bound on callers waiting at once.
const DefaultMaxConns = 128

// Server returns the HTTP server for the inbox. Its timeouts bound what a client that stops
// sending can hold: headers within BodyTimeout, the body within BodyTimeout after them (set per
// request, see readMessage), an idle keep-alive connection for a minute; and what one that stops
// reading can hold: each write of its answer within WriteTimeout (set per write, see
// deadlineWriter). There is no server-wide ReadTimeout or WriteTimeout: both would cut a caller
// waiting for a long turn.
func (h *Inbox) Server() *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: h.cfg.BodyTimeout,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          HTTPErrorLog(h.log),
	}
}

// HTTPErrorLog is an http.Server ErrorLog that writes to log (named "http") at warn level: what
// net/http reports there ("http: Accept error: ... too many open files", TLS handshake errors,
// handler panics) needs an operator's attention, and a plain line on stderr would break a JSON
// log stream.
func HTTPErrorLog(log *zap.Logger) *stdlog.Logger {
	l, err := zap.NewStdLogAt(log.Named("http"), zapcore.WarnLevel)
	if err != nil {
		// NewStdLogAt fails only for a level zap does not know.
		return zap.NewStdLog(log.Named("http"))
	}
	return l
}

// overloadBody is what a connection past the limit gets before it is closed.
const overloadBody = `{"error":"too many open connections to the inbox; try again soon","rule":"connections"}` + "\n"

// maxRefusing bounds the connections being answered 503 at once; past it a connection is closed
// without an answer.
const maxRefusing = 32

// ConnLimitListener wraps a listener so that at most a limit of connections are open at once. A
// connection past the limit is accepted, answered 503 and closed rather than left in the
// kernel's backlog: a crowd of stalled clients then costs no file descriptors and no wait for
// the others, and the process keeps the descriptors it needs for codex children and the control
// socket. Close waits for the refusals in progress.
type ConnLimitListener struct {
	net.Listener
	max     int64
	log     *zap.Logger
	refusal []byte
	open    atomic.Int64
	refused atomic.Int64
	full    atomic.Bool
	// refusing holds a token per refusal in progress; wg waits for them.
	refusing chan struct{}
	wg       sync.WaitGroup
}

// LimitConns returns ln limited to limit open connections (DefaultMaxConns when limit <= 0).
func LimitConns(ln net.Listener, limit int, log *zap.Logger) *ConnLimitListener {
	if limit <= 0 {
		limit = DefaultMaxConns
	}
	if log == nil {
		log = zap.NewNop()
	}
	refusal := fmt.Sprintf("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json; charset=utf-8\r\n"+
		"Retry-After: %s\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		retryAfterSeconds(DefaultRetryAfter), len(overloadBody), overloadBody)
	return &ConnLimitListener{Listener: ln, max: int64(limit), log: log.Named("bridge.local"),
		refusal: []byte(refusal), refusing: make(chan struct{}, maxRefusing)}
}

// Accept returns the next connection within the limit, refusing those past it.
func (l *ConnLimitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= l.max {
			if l.full.CompareAndSwap(true, false) {
				l.log.Info("inbox connections below the limit again", zap.Int64("max_conns", l.max), zap.Int64("refused", l.refused.Load()))
			}
			return &limitedConn{Conn: c, release: func() { l.open.Add(-1) }}, nil
		}
		l.open.Add(-1)
		l.refused.Add(1)
		if l.full.CompareAndSwap(false, true) {
			l.log.Warn("inbox connection limit reached; refusing new connections with 503", zap.Int64("max_conns", l.max))
		}
		select {
		case l.refusing <- struct{}{}:
			l.wg.Go(func() {
				defer func() { <-l.refusing }()
				l.refuse(c)
			})
		default:
			_ = c.Close()
		}
	}
}

// refuse answers c 503 and closes it. The request is read (and dropped) after the answer:
// closing a socket with unread input sends a reset, which can destroy the answer before the
// client reads it. The deadline bounds what a client that neither reads nor closes can hold.
func (l *ConnLimitListener) refuse(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write(l.refusal); err != nil {
		return
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
}

// Close closes the listener and waits for the refusals in progress.
func (l *ConnLimitListener) Close() error {
	err := l.Listener.Close()
	l.wg.Wait()
	return err
}

// Refused is the number of connections refused at the limit so far.
func (l *ConnLimitListener) Refused() int64 { return l.refused.Load() }

// Open is the number of connections open now.
func (l *ConnLimitListener) Open() int64 { return l.open.Load() }

type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}

// SyscallConn reaches the socket, so that a reload can hand the connection of a caller waiting
// for its answer to the daemon's next image.
func (c *limitedConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.New("connection has no descriptor")
	}
	return sc.SyscallConn()
}
