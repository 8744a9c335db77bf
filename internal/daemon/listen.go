package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/molecule-ai/codex-warm/internal/daemon/handoff"
)

// keptListener is a listener whose server can stop and start again without closing it: a reload
// stops serving, hands the socket to the next image (connections wait in the kernel's backlog
// meanwhile, none is refused), and serves again if the reload is called off.
type keptListener struct {
	net.Listener // a *net.TCPListener or *net.UnixListener
	mu           sync.Mutex
	keep         bool          // Close stops Accept but keeps the socket
	stopped      chan struct{} // closed by a kept Close
}

func newKeptListener(ln net.Listener) *keptListener {
	return &keptListener{Listener: ln, stopped: make(chan struct{})}
}

type deadliner interface{ SetDeadline(time.Time) error }

// Accept returns the next connection, or net.ErrClosed once a kept Close stopped it.
func (l *keptListener) Accept() (net.Conn, error) {
	for {
		l.mu.Lock()
		stopped := l.stopped
		l.mu.Unlock()
		select {
		case <-stopped:
			return nil, net.ErrClosed
		default:
		}
		c, err := l.Listener.Accept()
		if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
			continue // woken by a kept Close
		}
		return c, err
	}
}

// Close closes the socket, or in keep mode only stops Accept.
func (l *keptListener) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.keep {
		return l.Listener.Close()
	}
	select {
	case <-l.stopped:
	default:
		close(l.stopped)
	}
	if d, ok := l.Listener.(deadliner); ok {
		return d.SetDeadline(time.Unix(1, 0))
	}
	return nil
}

// setKeep makes the next Close keep the socket (true) or close it (false).
func (l *keptListener) setKeep(keep bool) {
	l.mu.Lock()
	l.keep = keep
	l.mu.Unlock()
}

// reopen makes a listener stopped by a kept Close accept again.
func (l *keptListener) reopen() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = make(chan struct{})
	if d, ok := l.Listener.(deadliner); ok {
		_ = d.SetDeadline(time.Time{})
	}
}

// fd is the socket's file descriptor.
func (l *keptListener) fd() (int, error) {
	sc, ok := l.Listener.(syscall.Conn)
	if !ok {
		return 0, fmt.Errorf("listener %s has no file descriptor", l.Addr())
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var fd int
	if err := rc.Control(func(u uintptr) { fd = int(u) }); err != nil {
		return 0, err
	}
	return fd, nil
}

// inheritedListener turns an inherited descriptor back into a listener and sets close-on-exec
// on it.
func inheritedListener(fd int, name string) (net.Listener, error) {
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	ln, err := net.FileListener(f) // a duplicate, close-on-exec
	if err != nil {
		return nil, fmt.Errorf("inherited %s listener (fd %d): %w", name, fd, err)
	}
	return ln, nil
}

// server is one HTTP server on a keptListener, which a reload pauses and resumes.
type server struct {
	name   string
	ln     *keptListener
	serve  net.Listener // what Serve gets: ln, possibly wrapped (connection limit)
	newSrv func() *http.Server
	errs   chan<- error

	mu  sync.Mutex
	srv *http.Server
	wg  sync.WaitGroup
}

// start serves on a new http.Server.
func (s *server) start() {
	srv := s.newSrv()
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
	s.wg.Go(func() {
		if err := srv.Serve(s.serve); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.errs <- fmt.Errorf("%s: %w", s.name, err)
		}
	})
}

// pause stops accepting and waits, until ctx is done, for the requests in flight; the socket
// stays open.
func (s *server) pause(ctx context.Context) error {
	s.ln.setKeep(true)
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	err := srv.Shutdown(ctx)
	s.wg.Wait()
	s.ln.setKeep(false)
	if err != nil {
		return fmt.Errorf("%s: requests still in flight: %w", s.name, err)
	}
	return nil
}

// resume serves again after pause.
func (s *server) resume() {
	s.ln.reopen()
	s.start()
}

// shutdown stops the server for good: requests in flight get until ctx is done, then their
// connections are closed; the socket is closed.
func (s *server) shutdown(ctx context.Context) error {
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	err := srv.Shutdown(ctx)
	if err != nil {
		_ = srv.Close()
	}
	s.wg.Wait()
	return err
}

// listen returns the listener the previous image handed over under name, else a new one.
func listen(hdoc *handoff.Doc, name, network, addr string) (net.Listener, error) {
	if fd, ok := inheritedFD(hdoc, name); ok {
		return inheritedListener(fd, name)
	}
	return net.Listen(network, addr)
}
