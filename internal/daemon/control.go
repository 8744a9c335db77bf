package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/bridge/local"
	"github.com/molecule-ai/codex-warm/internal/atomicfile"
	"github.com/molecule-ai/codex-warm/internal/control"
	"github.com/molecule-ai/codex-warm/internal/daemon/handoff"
	"github.com/molecule-ai/codex-warm/internal/health"
)

// The file the daemon keeps in its state directory besides those of the packages it runs
// (and the control socket, control.SocketName).
const lockFileName = "supervisor.lock"

// stateLock holds an exclusive flock on the state directory so that two daemons never share
// sessions.json and the inbox position. The kernel drops it when the process dies, even on
// SIGKILL, so a stale lock cannot block a restart.
type stateLock struct{ f *os.File }

func lockStateDir(dir string) (*stateLock, error) {
	path := filepath.Join(dir, lockFileName)
	// Not through a symbolic link: the pid written below would truncate the file it points at.
	f, err := atomicfile.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another supervisor is running with state dir %s (lock %s held)", dir, path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	_ = f.Truncate(0)
	_, _ = fmt.Fprintf(f, "%d\n", os.Getpid())
	return &stateLock{f: f}, nil
}

func (l *stateLock) Close() error { return l.f.Close() }

// fd is the lock file's descriptor, which a reload hands over (the flock goes with it).
func (l *stateLock) fd() (int, error) { return int(l.f.Fd()), nil }

// controlServer serves the daemon's verbs on the state directory's control socket, on a
// listener a reload hands over.
type controlServer struct {
	srv  *server
	path string
}

// controlConfig configures the control socket.
type controlConfig struct {
	dir    string
	status func() control.StatusDoc
	ready  http.Handler // answers /v1/readyz
	// reload starts a reload (POST /v1/reload) and returns its attempt number.
	reload func(trigger string) (int, error)
	// stop asks the daemon to drain and exit (POST /v1/stop), as SIGTERM does.
	stop func()
	// register, if set, registers further verbs.
	register  func(*control.Server)
	inherited *handoff.Doc // the previous image's, whose control socket is taken over
	errs      chan<- error
	log       *zap.Logger
}

// startControl serves the status document, the health probes, the reload and the stop on the
// state directory's control socket.
func startControl(cfg controlConfig) (*controlServer, error) {
	path := filepath.Join(cfg.dir, control.SocketName)
	var ln net.Listener
	var err error
	if fd, ok := inheritedFD(cfg.inherited, handoff.ListenerControl); ok {
		ln, err = inheritedListener(fd, "control")
	} else {
		ln, err = control.Listen(cfg.dir)
	}
	if err != nil {
		return nil, err
	}
	if ul, ok := ln.(*net.UnixListener); ok {
		// Close must not remove the socket a reload hands over; Close removes it itself.
		ul.SetUnlinkOnClose(false)
	}
	cs := control.NewServer()
	control.Handle(cs, control.VerbStatus, http.StatusOK, func(context.Context, control.Empty) (control.StatusDoc, error) {
		return cfg.status(), nil
	})
	control.Handle(cs, control.VerbReload, http.StatusAccepted, func(context.Context, control.Empty) (control.ReloadAnswer, error) {
		n, err := cfg.reload("control socket")
		if err != nil {
			return control.ReloadAnswer{}, control.Refuse(http.StatusConflict, err)
		}
		return control.ReloadAnswer{Attempt: n}, nil
	})
	control.Handle(cs, control.VerbStop, http.StatusAccepted, func(context.Context, control.Empty) (control.Empty, error) {
		if cfg.stop == nil {
			return control.Empty{}, control.Refuse(http.StatusNotImplemented, errors.New("this daemon cannot be stopped on its control socket"))
		}
		cfg.stop()
		return control.Empty{}, nil
	})
	cs.HandleHTTP(control.VerbLive, http.HandlerFunc(health.Live))
	cs.HandleHTTP(control.VerbReady, cfg.ready)
	if cfg.register != nil {
		cfg.register(cs)
	}
	log := cfg.log
	kl := newKeptListener(ln)
	c := &controlServer{path: path, srv: &server{name: "control socket", ln: kl, serve: kl, errs: cfg.errs,
		newSrv: func() *http.Server { return cs.HTTPServer(local.HTTPErrorLog(log.Named("control"))) }}}
	c.srv.start()
	return c, nil
}

// inheritedFD is the descriptor of the listener name in the previous image's handoff.
func inheritedFD(hdoc *handoff.Doc, name string) (int, bool) {
	if hdoc == nil {
		return 0, false
	}
	for _, l := range hdoc.Listeners {
		if l.Name == name {
			return l.FD, true
		}
	}
	return 0, false
}

// Close stops the server, waits for its goroutine and removes the socket file.
func (c *controlServer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := c.srv.shutdown(ctx)
	_ = os.Remove(c.path)
	return err
}

// controlGet asks the daemon owning dir for urlPath on its control socket (control.Client.Do).
func controlGet(ctx context.Context, dir, urlPath string, timeout time.Duration) (int, []byte, error) {
	return control.NewClient(dir).Do(ctx, http.MethodGet+" "+urlPath, nil, timeout)
}

func capBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
