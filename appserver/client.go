// Package appserver runs one `codex app-server` child process and speaks JSON-RPC to it over its
// stdio: spawn, handshake, threads, one turn at a time, answers to the server's own requests,
// interrupts, liveness, and a close that always reaps the child.
//
// The wire facts it relies on are in docs/PROTOCOL.md; recorded sessions are in
// testdata/codex-wire.
package appserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sourcegraph/jsonrpc2"
	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/childproc"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// Client is one codex app-server child and its JSON-RPC connection.
//
// Lifecycle: Start returns a ready client (spawned, handshake done). It stays usable until it
// fails (the child exited, its stream broke, a write stalled) or Close is called; either closes
// Done, and Err says why. Close then stops the child (stdin EOF, SIGTERM, SIGKILL to its
// process group), reaps it, and returns after every goroutine of the client has exited. A
// failed client must still be closed.
//
// The process (its pipes, waiter and stderr drain) is a child, usually a *childproc.Process;
// Close stops it through Stop, which also waits for its goroutines.
//
// Goroutines, all owned by the client and waited for by Close:
//   - jsonrpc2's reader calls handler.Handle, which only appends to the inbound queue;
//   - dispatcher pops the queue in order: routes notifications to the running turn and answers
//     server requests;
//   - monitor turns "child exited / stream ended / write failed / Close" into the client's
//     failure, once.
type Client struct {
	cfg Config
	// logp is the logger of every line: replaced by SetLogger when a chat takes a spare, while
	// the client's goroutines log.
	logp   atomic.Pointer[zap.Logger]
	proc   child
	pid    int
	stream *lineStream
	conn   *jsonrpc2.Conn
	queue  *inboundQueue

	lastActivity atomic.Int64 // unix nanoseconds of the last line read
	// turned is set once a turn of any thread (a warm-up's too) completed in this process: the
	// process is warm, and a spare thread opened in it later needs no throwaway turn (WarmUp).
	turned atomic.Bool

	// life is cancelled, with the failure as its cause, when the client becomes unusable.
	life context.Context
	kill context.CancelCauseFunc

	closing   chan struct{} // closed when Close begins
	readEnd   chan struct{} // closed when reading stopped; readErr is set before
	readErr   error
	writeFail chan struct{} // closed on the first failed write; writeErr is set before
	writeErr  error
	writeOnce sync.Once
	wg        sync.WaitGroup

	mu sync.Mutex
	// busy are the threads a RunTurn or CompactThread is in progress on: one at a time per
	// thread, since codex merges a second turn/start into the running turn.
	busy map[string]bool
	// wedged are the threads whose turn ignored turn/interrupt: no more turns on them. codex
	// still runs that turn, so the thread cannot be unloaded and the child is suspect; the
	// pool decides when to retire the child (Wedged).
	wedged map[string]bool
	// turns are the running turns notifications are routed to, by thread.
	turns map[string]*turnState
	// unloading are the threads an UnloadThread waits on, closed by their thread/closed.
	unloading map[string]chan struct{}
	gone      bool // the dispatcher has exited: no turn can be routed any more

	closeOnce sync.Once
	closeErr  error

	tokenMu sync.Mutex
	token   string // the ChatGPT access token the child was last given (Config.Tokens)
	// prevToken is the token before the last renewal, renewedAt when that was: a refresh
	// request another thread sent before the renewal reached codex is for prevToken.
	prevToken string
	renewedAt time.Time
	tokenKick chan struct{} // wakes pushTokens: a new token, or a turn ended
	// gate is held by each turn for its whole length, and alone by a token push or a pause.
	gate turnGate

	pauseMu sync.Mutex
	thawed  chan struct{} // non-nil while paused (Pause); closed by Resume
	// held is the pause of a client whose turn runs (pauseRunning): the dispatcher's hold and
	// the write gate, released by Resume.
	held *runningHold

	// calls counts the requests sent and not answered yet: a running turn is handed over only
	// when none is, so that no response is read by an image that did not send the request.
	calls atomic.Int32
	// asksMu guards asks: the approval requests handed to a person and not answered yet, by
	// their JSON-RPC id's text; a handed-over turn carries them.
	asksMu sync.Mutex
	asks   map[string]PendingRequest
	// adopted are the running turns a previous image handed over, by thread, until
	// ResumeTurn or ResumeThreadTurn takes each.
	adopted map[string]*turnState
}

// Start spawns the child as the leader of its own session and process group and completes the handshake (initialize +
// initialized) within HandshakeTimeout. ctx bounds only the handshake; the child runs until
// Close. On failure the child is closed and reaped and the error includes the stderr tail.
func Start(ctx context.Context, cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	if cfg.Bin == "" {
		return nil, errors.New("start codex app-server: Config.Bin is empty")
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("start codex app-server %s: %w", cfg.Bin, context.Cause(ctx))
	}
	c, err := spawn(cfg)
	if err != nil {
		return nil, err
	}
	if err := c.handshake(ctx); err != nil {
		_ = c.Close()
		if errors.Is(err, ErrHandshakeTimeout) {
			err = fmt.Errorf("%w; stderr tail: %s", err, orEmpty(c.StderrTail()))
		}
		return nil, fmt.Errorf("start codex app-server %s: %w", cfg.Bin, classifyExit(err))
	}
	c.logger().Debug("handshake done")
	if cfg.Tokens != nil {
		c.wg.Add(1)
		go c.pushTokens()
	}
	return c, nil
}

func spawn(cfg Config) (*Client, error) {
	args := make([]string, 0, 2*len(cfg.ConfigOverrides)+len(cfg.Args)+12)
	if cfg.Tokens != nil {
		// First, so that an operator's own -c cannot hand the login back to the child.
		args = append(args, "-c", ephemeralCredentials)
	}
	if cfg.WarmUpURL != "" {
		for _, kv := range warmUpOverrides(cfg.WarmUpURL) {
			args = append(args, "-c", kv)
		}
	}
	for _, kv := range cfg.ConfigOverrides {
		args = append(args, "-c", kv)
	}
	args = append(args, cfg.Args...)

	env := cfg.Env
	if env == nil {
		env = os.Environ()
	}
	if cfg.CodexHome != "" {
		env = setEnv(env, "CODEX_HOME", cfg.CodexHome)
	}

	p, err := childproc.StartProcess(childproc.ProcessConfig{
		Bin:             cfg.Bin,
		Args:            args,
		Env:             env,
		Dir:             cfg.Dir,
		Credential:      cfg.Credential,
		StderrTailBytes: cfg.StderrTailBytes,
		CloseGrace:      cfg.CloseGrace,
		Logger:          cfg.Logger.Named("appserver"),
		Fork:            cfg.Fork,
	})
	if err != nil {
		return nil, fmt.Errorf("start codex app-server %s: %w", cfg.Bin, err)
	}
	c := newClient(cfg, p)
	c.wg.Add(2)
	go c.monitor()
	go c.dispatcher()
	c.logger().Info("codex app-server started", zap.String("bin", cfg.Bin), zap.Strings("args", args),
		zap.String("dir", cfg.Dir), zap.String("codex_home", EffectiveCodexHome(env)))
	return c, nil
}

// child is the process behind a Client: a *childproc.Process, or a test's pipes standing in
// for one.
type child interface {
	PID() int
	// Stdin is the write end of the child's stdin, Stdout the read end of its stdout; the
	// client's connection writes and reads them and closes both.
	Stdin() *os.File
	Stdout() *os.File
	// Exited is closed once the child has been reaped; ProcessState and ExitErr say how.
	Exited() <-chan struct{}
	ProcessState() *os.ProcessState
	ExitErr() error
	// Tail is the end of the child's stderr, complete once StderrDone is closed.
	Tail() *childproc.Tail
	StderrDone() <-chan struct{}
	// Stop closes stdin and escalates to signals until the child is reaped.
	Stop(ctx context.Context) (childproc.StopHow, error)
}

// newClient returns the client of the child p, connected to its stdio (jsonrpc2 starts reading
// at once), without the client's own goroutines. spawn starts them after a real process; the
// fuzz test builds a client over plain pipes with it.
func newClient(cfg Config, p child) *Client { return newClientPending(cfg, p, nil) }

// newClientPending is newClient, whose reader first takes pending (see Handover.Pending).
func newClientPending(cfg Config, p child, pending []byte) *Client {
	pid := p.PID()
	c := &Client{
		cfg:       cfg,
		proc:      p,
		pid:       pid,
		closing:   make(chan struct{}),
		readEnd:   make(chan struct{}),
		writeFail: make(chan struct{}),
		tokenKick: make(chan struct{}, 1),
		busy:      make(map[string]bool),
		wedged:    make(map[string]bool),
		turns:     make(map[string]*turnState),
		unloading: make(map[string]chan struct{}),
	}
	c.logp.Store(clientLogger(cfg.Logger, pid))
	c.life, c.kill = context.WithCancelCause(context.Background())
	c.lastActivity.Store(time.Now().UnixNano())
	c.queue = newInboundQueue(func(n int, bytes int64) {
		c.logger().Warn("inbound queue is growing: notifications are consumed slower than codex sends them",
			zap.Int("messages", n), zap.Int64("bytes", bytes))
	})
	c.connect(p.Stdout(), p.Stdin(), pending)
	return c
}

// connect builds the JSON-RPC connection over the child's stdout (out, read) and stdin (in,
// written); jsonrpc2 starts reading at once, first the pending bytes (read from out by an
// earlier image of the daemon, not yet parsed).
func (c *Client) connect(out, in *os.File, pending []byte) {
	c.stream = newLineStream(out, in, c.cfg.MaxLineBytes, c.cfg.WriteTimeout)
	if len(pending) > 0 {
		c.stream.r = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(pending), out), 64<<10)
	}
	c.stream.onLine = func() { c.lastActivity.Store(time.Now().UnixNano()) }
	c.stream.onReadEnd = func(err error) {
		c.readErr = err
		close(c.readEnd)
	}
	c.stream.onWriteErr = func(err error) {
		c.writeOnce.Do(func() {
			c.writeErr = err
			close(c.writeFail)
		})
	}
	c.stream.onNotification = handler{c}.notification
	c.conn = jsonrpc2.NewConn(context.Background(), c.stream, handler{c},
		jsonrpc2.SetLogger(rpcLogger{c}), jsonrpc2.OnRecv(c.onResponse))
}

func (c *Client) handshake(ctx context.Context) error {
	hctx, cancel := context.WithTimeoutCause(ctx, c.cfg.HandshakeTimeout,
		fmt.Errorf("%w: pid %d did not answer initialize within %s", ErrHandshakeTimeout, c.pid, c.cfg.HandshakeTimeout))
	defer cancel()
	params := protocol.InitializeParams{ClientInfo: c.cfg.ClientInfo}
	if experimental := c.cfg.Tokens != nil || len(c.cfg.DynamicTools) > 0; len(c.cfg.OptOutNotifications) > 0 || experimental {
		// Client-owned tokens and client-defined tools are part of the experimental API.
		params.Capabilities = &protocol.InitializeCapabilities{OptOutNotificationMethods: c.cfg.OptOutNotifications,
			ExperimentalAPI: experimental}
	}
	var res protocol.InitializeResult
	if err := c.call(hctx, protocol.MethodInitialize, params, &res); err != nil {
		return err
	}
	if err := c.conn.Notify(hctx, protocol.MethodInitialized, nil); err != nil {
		return c.brokenErr(protocol.MethodInitialized, err)
	}
	c.logger().Debug("initialized", zap.String("user_agent", res.UserAgent), zap.String("codex_home", res.CodexHome))
	if c.cfg.Tokens != nil {
		return c.logIn(hctx)
	}
	return nil
}

// PID is the child's process id (and process group id).
func (c *Client) PID() int { return c.pid }

// Done is closed when the client became unusable: the child exited, its stream broke, or Close
// was called.
func (c *Client) Done() <-chan struct{} { return c.life.Done() }

// Err says why Done was closed; nil while the client is usable. A dead child yields an
// *ExitError (errors.Is ErrChildExited) and Close yields ErrClosed.
func (c *Client) Err() error {
	if c.life.Err() == nil {
		return nil
	}
	return context.Cause(c.life)
}

// ExitStatus returns the child's wait status once it has been reaped, else nil.
func (c *Client) ExitStatus() *os.ProcessState { return c.proc.ProcessState() }

// LastActivity is when the last line was read from the child (the start time before that).
func (c *Client) LastActivity() time.Time { return time.Unix(0, c.lastActivity.Load()) }

// StderrTail returns the last Config.StderrTailBytes of the child's stderr.
func (c *Client) StderrTail() string { return c.proc.Tail().String() }

// Close stops the child and releases everything: close stdin (codex exits on EOF), wait
// CloseGrace, SIGTERM the process group, wait CloseGrace, SIGKILL the group; the child is always
// reaped. A turn in flight returns ErrClosed. Close is idempotent and safe for concurrent use;
// every call returns after the client's goroutines have exited.
func (c *Client) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.shutdown() })
	return c.closeErr
}

func (c *Client) shutdown() error {
	// A paused child is being handed to the next image of the daemon: nothing may touch it
	// unless the handover is called off (Resume).
	c.pauseMu.Lock()
	thawed := c.thawed
	c.pauseMu.Unlock()
	if thawed != nil {
		<-thawed
	}
	close(c.closing)
	grace := c.cfg.CloseGrace
	how, err := c.proc.Stop(context.Background())
	// Let the reader take what the child wrote last, then release the connection (this also
	// closes our end of stdout, in case something outside the group still holds the pipe).
	await(c.readEnd, grace)
	_ = c.conn.Close()
	// Closing the stream unblocks a reader waiting on the pipe at once, but one still decoding a
	// large line finishes that line first. Close returns only after jsonrpc2's reader goroutine
	// is done (readEnd closes as its last read fails; jsonrpc2's DisconnectNotify closes earlier).
	if !await(c.readEnd, grace) {
		c.logger().Warn("jsonrpc2 reader still busy after the stream was closed; waiting for it")
		<-c.readEnd
	}
	c.wg.Wait()
	c.logger().Info("codex app-server closed", zap.Stringer("how", how), zap.String("status", c.statusString()))
	return err
}

// monitor decides, once, why the client stopped being usable, records it as the cause of life,
// and closes the inbound queue so that the dispatcher fails the running turn after delivering
// everything that arrived before.
func (c *Client) monitor() {
	defer c.wg.Done()
	grace := c.cfg.CloseGrace
	var err error
	select {
	case <-c.proc.Exited():
		// Exited. Let the reader reach EOF, so that the last lines (a turn/completed, say) are
		// still dispatched, and stderr drain, so that the tail is complete.
		c.awaitUnlessClosing(c.readEnd, grace)
		c.awaitUnlessClosing(c.proc.StderrDone(), grace)
		err = c.exitError(nil)
	case <-c.readEnd:
		if isStreamEOF(c.readErr) {
			// stdout closed: the child is exiting. Prefer reporting its exit status.
			if c.awaitUnlessClosing(c.proc.Exited(), grace) {
				c.awaitUnlessClosing(c.proc.StderrDone(), grace)
				err = c.exitError(nil)
			} else {
				err = c.exitError(errors.New("closed its stdout"))
			}
		} else {
			err = c.exitError(c.readErr)
		}
	case <-c.writeFail:
		if c.awaitUnlessClosing(c.proc.Exited(), grace) {
			c.awaitUnlessClosing(c.proc.StderrDone(), grace)
			err = c.exitError(nil)
		} else {
			err = c.exitError(fmt.Errorf("writing to its stdin failed: %w", c.writeErr))
		}
	case <-c.closing:
		// Close releases the connection itself, after the child had a chance to exit cleanly.
		c.fail(fmt.Errorf("%w (pid %d)", ErrClosed, c.pid))
		c.queue.close()
		return
	}
	c.fail(err)
	c.queue.close()
	// Release calls still waiting for a response (and a reader blocked on a pipe that something
	// outside the group keeps open). Nothing more can usefully come from this child. The monitor
	// is in wg, so waiting for readEnd here makes jsonrpc2's reader goroutine one the client
	// waits for.
	_ = c.conn.Close()
	<-c.readEnd
}

// fail makes err the reason the client is unusable; the first reason wins.
func (c *Client) fail(err error) {
	if c.life.Err() == nil {
		if errors.Is(err, ErrClosed) {
			c.logger().Debug("client closed")
		} else {
			c.logger().Warn("codex app-server failed", zap.Error(err))
		}
	}
	c.kill(err)
}

// exitError builds the *ExitError for the current state of the child.
func (c *Client) exitError(reason error) *ExitError {
	e := &ExitError{PID: c.pid, Status: "running", Code: -1, Reason: reason, StderrTail: c.StderrTail()}
	if st := c.proc.ProcessState(); st != nil {
		e.Status, e.Code = st.String(), st.ExitCode()
	} else if err := c.proc.ExitErr(); err != nil {
		e.Status = err.Error()
	}
	return e
}

func (c *Client) statusString() string {
	if st := c.ExitStatus(); st != nil {
		return st.String()
	}
	return "unknown"
}

// awaitUnlessClosing waits up to d for ch; it gives up early when Close begins, since Close
// reaps the child itself.
func (c *Client) awaitUnlessClosing(ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	case <-c.closing:
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
}

// await waits up to d for ch to close.
func await(ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

// isStreamEOF reports whether a read error means the child closed its stdout (or we closed our
// end), as opposed to a protocol error.
func isStreamEOF(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, os.ErrClosed)
}

// bind returns ctx, additionally cancelled with the client's failure as cause when the client
// becomes unusable, so that waits on the connection never outlive the child.
func (c *Client) bind(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(c.life, func() { cancel(context.Cause(c.life)) })
	return ctx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// call sends a request and waits for its result, ctx, or the client's failure. A request codex
// refused as overloaded is sent again (see retryOverloaded).
func (c *Client) call(ctx context.Context, method string, params, result any) error {
	return c.retryOverloaded(ctx, method, func() error { return c.callOnce(ctx, method, params, result) })
}

// retryOverloaded runs attempt, one send of method and the wait for its response, and runs it
// again after a backoff for as long as codex refuses the request as overloaded (-32001) and
// Config.Overload allows. Every request the client sends goes through it. The waits end at once
// when ctx is done or the client fails.
func (c *Client) retryOverloaded(ctx context.Context, method string, attempt func() error) error {
	bctx, cancel := c.bind(ctx)
	defer cancel()
	return c.cfg.Overload.do(bctx, func(n int, wait time.Duration) {
		c.logger().Info("codex app-server is overloaded; retrying the request",
			zap.String("method", method), zap.Int("retry", n), zap.Duration("wait", wait))
		if c.cfg.OnOverloadRetry != nil {
			c.cfg.OnOverloadRetry(method)
		}
	}, attempt)
}

// callOnce sends a request once and waits for its result, ctx, or the client's failure.
func (c *Client) callOnce(ctx context.Context, method string, params, result any) error {
	if err := c.Err(); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	c.calls.Add(1)
	defer c.calls.Add(-1)
	w, err := c.conn.DispatchCall(ctx, method, params)
	if err != nil {
		return c.brokenErr(method, err)
	}
	return c.wait(ctx, method, w, result)
}

// wait waits for the response of a dispatched call, ctx, or the client's failure, whichever
// comes first.
func (c *Client) wait(ctx context.Context, method string, w jsonrpc2.Waiter, result any) error {
	bctx, cancel := c.bind(ctx)
	defer cancel()
	err := w.Wait(bctx, result)
	if err != nil && c.life.Err() != nil && ctx.Err() == nil {
		return fmt.Errorf("%s: %w", method, c.Err())
	}
	return c.responseErr(ctx, method, err)
}

// waitUnbound waits for the response of a dispatched call or ctx. A response that arrived
// before the client failed is still returned; if none did, the wait ends when the monitor closes
// the connection.
func (c *Client) waitUnbound(ctx context.Context, method string, w jsonrpc2.Waiter, result any) error {
	return c.responseErr(ctx, method, w.Wait(ctx, result))
}

func (c *Client) responseErr(ctx context.Context, method string, err error) error {
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("%s on codex pid %d: %w", method, c.pid, context.Cause(ctx))
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		// The response arrived, but some of its fields have unexpected types. They are skipped
		// and the rest is decoded; callers check the fields they need (a thread or turn id).
		// This is not a broken connection.
		c.logger().Warn("response with fields of unexpected types", zap.String("method", method), zap.Error(err))
		return nil
	}
	var re *jsonrpc2.Error
	if errors.As(err, &re) {
		if re.Code == protocol.CodeOverloaded {
			return fmt.Errorf("%s on codex pid %d: %w: %w", method, c.pid, ErrOverloaded, re)
		}
		return fmt.Errorf("%s on codex pid %d: %w", method, c.pid, re)
	}
	return c.brokenErr(method, err)
}

// brokenErr explains a failed send or wait: the connection is gone, so report why the client
// died once the monitor has decided.
func (c *Client) brokenErr(method string, err error) error {
	t := time.NewTimer(2 * c.cfg.CloseGrace)
	defer t.Stop()
	select {
	case <-c.life.Done():
		return fmt.Errorf("%s: %w", method, c.Err())
	case <-t.C:
		return fmt.Errorf("%s on codex pid %d: %w: %v", method, c.pid, ErrChildExited, err)
	}
}

// handler is the jsonrpc2 handler. It runs on jsonrpc2's only read goroutine, so it never
// blocks: it queues the message for the dispatcher and returns.
type handler struct{ c *Client }

func (h handler) Handle(_ context.Context, _ *jsonrpc2.Conn, req *jsonrpc2.Request) {
	it := inbound{kind: inNotification, notif: protocol.Notification{Method: req.Method}}
	if req.Params != nil {
		it.notif.Params = *req.Params
		it.size = len(*req.Params)
	}
	if !req.Notif {
		it.kind, it.req = inRequest, req
	}
	it.size += len(req.Method)
	if !h.c.queue.push(it) && !req.Notif {
		h.c.logger().Debug("server request dropped: client is shutting down", zap.String("method", req.Method))
	}
}

// notification queues a notification: from Handle, or straight from the stream (notifyfast.go).
func (h handler) notification(method string, params json.RawMessage) {
	h.c.queue.push(inbound{kind: inNotification, notif: protocol.Notification{Method: method, Params: params},
		size: len(method) + len(params)})
}

// rpcLogger routes jsonrpc2's own messages (protocol errors on close, stray responses) to zap.
type rpcLogger struct{ c *Client }

func (l rpcLogger) Printf(format string, v ...any) {
	l.c.logger().Debug(strings.TrimSpace(fmt.Sprintf(format, v...)))
}

func setEnv(env []string, key, value string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return append(out, key+"="+value)
}

func orEmpty(s string) string {
	if strings.TrimSpace(s) == "" {
		return "(empty)"
	}
	return s
}
