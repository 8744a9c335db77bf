package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/codexauth"
	"github.com/molecule-ai/codex-warm/handoff"
	"github.com/molecule-ai/codex-warm/health"
	"github.com/molecule-ai/codex-warm/inbox/local"
	"github.com/molecule-ai/codex-warm/inbox/molecule"
	"github.com/molecule-ai/codex-warm/internal/atomicfile"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// Files the daemon keeps in its state directory besides those of the packages it runs.
const (
	controlSocketName = "supervisor.sock"
	lockFileName      = "supervisor.lock"
)

// DaemonInfo describes the running daemon in a status answer.
type DaemonInfo struct {
	PID     int       `json:"pid"`
	Version string    `json:"version"`
	Started time.Time `json:"started"`
	Inbox   string    `json:"inbox"`
	Listen  string    `json:"listen,omitempty"`
	// MetricsListen is the bound address of the metrics listener (--metrics-listen); empty when
	// off.
	MetricsListen string `json:"metrics_listen,omitempty"`
	CodexBin      string `json:"codex_bin"`
	StateDir      string `json:"state_dir"`
	// Goroutines and the memory figures are the daemon's own, without its codex children, so operators
	// (and the soak test) can see that it returns to its baseline after load.
	Goroutines int    `json:"goroutines"`
	RSSBytes   int64  `json:"rss_bytes"`
	PSSBytes   int64  `json:"pss_bytes"`
	USSBytes   int64  `json:"uss_bytes"`
	HeapBytes  uint64 `json:"heap_bytes"`
	// Executable is the file a reload runs; Reloads counts the reloads since Started, the
	// start of the daemon's first image; LastReload is the last attempt, nil before any.
	Executable string      `json:"executable,omitempty"`
	Reloads    int         `json:"reloads"`
	LastReload *ReloadInfo `json:"last_reload,omitempty"`
	// CodexVersion is what `codex --version` reported at start-up.
	CodexVersion string `json:"codex_version,omitempty"`
	// CodexAuth is codex's login state as last checked (at start-up, and again when a refused
	// message finds the answer stale).
	CodexAuth *CodexAuth `json:"codex_auth,omitempty"`
}

// CodexAuth.State values.
const (
	CodexLoggedIn    = "ok"
	CodexNotLoggedIn = "not_logged_in"
	CodexAuthUnknown = "unknown"
)

// CodexAuth is what codex said about its credentials (account/read).
type CodexAuth struct {
	// State is CodexLoggedIn, CodexNotLoggedIn (messages are refused with the login hint) or
	// CodexAuthUnknown (the check failed; messages are served).
	State string `json:"state"`
	// Account is the kind of credentials codex has ("apiKey", "chatgpt", ...), "" for none.
	Account string `json:"account,omitempty"`
	// RequiresOpenAIAuth is false when the model provider needs no OpenAI login.
	RequiresOpenAIAuth bool      `json:"requires_openai_auth"`
	Checked            time.Time `json:"checked"`
	// Detail says why the state is not CodexLoggedIn.
	Detail string `json:"detail,omitempty"`
	// Tokens is the ChatGPT login the daemon holds for its children (nil: codex holds its own
	// login): its state, expiry and last refresh, never a token.
	Tokens *codexauth.Status `json:"chatgpt_tokens,omitempty"`
	// LoginOwner is who renews the ChatGPT login: codexauth.OwnerPlatform, OwnerDaemon or
	// OwnerChild (each codex child holds its own).
	LoginOwner string `json:"login_owner,omitempty"`
}

// StatusDoc is the control socket's answer to GET /v1/status.
type StatusDoc struct {
	Daemon   DaemonInfo          `json:"daemon"`
	Snapshot supervisor.Snapshot `json:"snapshot"`
	// Bridge is the Molecule inbox's counters; nil on the local inbox. Typed, not decoded into
	// a map, so that the text status can show them too.
	Bridge *molecule.Stats `json:"bridge,omitempty"`
	// LocalFiles counts the files the local inbox's replies carried and refused; nil on the
	// Molecule inbox (Bridge counts them there).
	LocalFiles *local.FileStats `json:"local_files,omitempty"`
}

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

// controlServer serves the status endpoint on a unix socket readable only by the daemon's user:
// the process table names chats, which is not for other users of the host.
type controlServer struct {
	srv  *server
	path string
}

// controlConfig configures the control socket.
type controlConfig struct {
	dir    string
	status func() StatusDoc
	ready  http.Handler // answers /v1/readyz
	// reload starts a reload (POST /v1/reload) and returns its attempt number.
	reload func(trigger string) (int, error)
	// stop asks the daemon to drain and exit (POST /v1/stop), as SIGTERM does.
	stop      func()
	inherited *handoff.Doc // the previous image's, whose control socket is taken over
	errs      chan<- error
	log       *zap.Logger
	routes    func(*http.ServeMux) // more verbs (archivecmd.go)
}

// ReloadAnswer is the control socket's answer to POST /v1/reload.
type ReloadAnswer struct {
	// Attempt is the reload's number in status (daemon.last_reload.attempt); 0 when refused.
	Attempt int    `json:"attempt,omitempty"`
	Error   string `json:"error,omitempty"`
}

// startControl serves the status document, the health probes and the reload on the state
// directory's control socket.
func startControl(cfg controlConfig) (*controlServer, error) {
	path := filepath.Join(cfg.dir, controlSocketName)
	var ln net.Listener
	var err error
	if fd, ok := inheritedFD(cfg.inherited, handoff.ListenerControl); ok {
		ln, err = inheritedListener(fd, "control")
		if err != nil {
			return nil, err
		}
	} else {
		// The state lock is held, so a socket file here is left over from a daemon that died.
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("remove stale control socket %s: %w", path, err)
		}
		ln, err = listenPrivateUnix(path)
		if err != nil {
			return nil, fmt.Errorf("listen on control socket %s: %w", path, err)
		}
		if err := os.Chmod(path, 0o600); err != nil {
			ln.Close()
			return nil, fmt.Errorf("chmod control socket %s: %w", path, err)
		}
	}
	if ul, ok := ln.(*net.UnixListener); ok {
		// Close must not remove the socket a reload hands over; Close removes it itself.
		ul.SetUnlinkOnClose(false)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(cfg.status())
	})
	mux.HandleFunc("POST /v1/reload", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		n, err := cfg.reload("control socket")
		if err != nil {
			w.WriteHeader(http.StatusConflict)
			_ = json.NewEncoder(w).Encode(ReloadAnswer{Error: err.Error()})
			return
		}
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(ReloadAnswer{Attempt: n})
	})
	mux.HandleFunc("POST /v1/stop", func(w http.ResponseWriter, r *http.Request) {
		if cfg.stop == nil {
			http.Error(w, "this daemon cannot be stopped on its control socket", http.StatusNotImplemented)
			return
		}
		cfg.stop()
		w.WriteHeader(http.StatusAccepted)
	})
	if cfg.routes != nil {
		cfg.routes(mux)
	}
	mux.HandleFunc("GET /v1/healthz", health.Live)
	mux.Handle("GET /v1/readyz", cfg.ready)
	log := cfg.log
	kl := newKeptListener(ln)
	c := &controlServer{path: path, srv: &server{name: "control socket", ln: kl, serve: kl, errs: cfg.errs,
		newSrv: func() *http.Server {
			return &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ErrorLog: local.HTTPErrorLog(log.Named("control"))}
		}}}
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

// errNoDaemon means no daemon answers on the state directory's control socket.
var errNoDaemon = errors.New("no supervisor daemon is running")

// maxSocketPath is the longest path a unix socket can have on Linux.
const maxSocketPath = 107

// fetchStatus asks the daemon owning dir for its status.
func fetchStatus(ctx context.Context, dir string) (StatusDoc, error) {
	code, body, err := controlGet(ctx, dir, "/v1/status", 5*time.Second)
	if err != nil {
		return StatusDoc{}, err
	}
	path := filepath.Join(dir, controlSocketName)
	if code != http.StatusOK {
		return StatusDoc{}, fmt.Errorf("what answers at %s is not the daemon's status: HTTP %d: %s", path, code, bytes.TrimSpace(capBytes(body, 4096)))
	}
	var doc StatusDoc
	if err := json.Unmarshal(body, &doc); err != nil {
		return StatusDoc{}, fmt.Errorf("decode status from %s: %w", path, err)
	}
	return doc, nil
}

// controlGet asks the daemon owning dir for urlPath on its control socket, within timeout, and
// returns the HTTP status and body (at most 64 MiB). It fails with errNoDaemon when no daemon
// listens there.
func controlGet(ctx context.Context, dir, urlPath string, timeout time.Duration) (int, []byte, error) {
	return controlDo(ctx, dir, http.MethodGet, urlPath, timeout)
}

// controlDo sends method urlPath to the daemon owning dir on its control socket, as controlGet
// does for GET.
func controlDo(ctx context.Context, dir, method, urlPath string, timeout time.Duration) (int, []byte, error) {
	path := filepath.Join(dir, controlSocketName)
	// The daemon could not listen on a longer path either (sockaddr_un holds 108 bytes with the
	// terminating NUL); dialing it fails with a bare EINVAL.
	if len(path) > maxSocketPath {
		return 0, nil, fmt.Errorf("%w (state dir %s: its socket path %s is %d bytes, too long for a unix socket: at most %d)",
			errNoDaemon, dir, path, len(path), maxSocketPath)
	}
	client := &http.Client{
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", path)
			},
		},
		Timeout: timeout,
	}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, method, "http://supervisor"+urlPath, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		switch {
		case errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOENT):
			return 0, nil, fmt.Errorf("%w (state dir %s, no socket at %s)", errNoDaemon, dir, path)
		case errors.Is(err, syscall.ECONNREFUSED):
			return 0, nil, fmt.Errorf("%w (state dir %s: nobody listens on %s, left by a daemon that died)", errNoDaemon, dir, path)
		case errors.Is(err, syscall.ENOTDIR):
			return 0, nil, fmt.Errorf("%w (state dir %s, or a directory above it, is not a directory)", errNoDaemon, dir)
		}
		return 0, nil, fmt.Errorf("cannot ask the daemon at %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("read answer of daemon at %s: %w", path, err)
	}
	return resp.StatusCode, body, nil
}

func capBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
