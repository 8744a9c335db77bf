package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/local"
	"github.com/molecule-ai/codex-warm/internal/chatfiles"
	"github.com/molecule-ai/codex-warm/internal/childproc"
	"github.com/molecule-ai/codex-warm/internal/control"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// Config is what the demo runs.
type Config struct {
	// Codex is the native codex binary; Supervisor the supervisor executable the daemon runs
	// from (`Supervisor run ...`).
	Codex      string
	Supervisor string
	// Keep keeps the demo's temporary directory (logs, sessions.json).
	Keep bool
	// Latency delays every mock model answer.
	Latency        time.Duration
	Stdout, Stderr io.Writer
}

// Run runs the whole pipeline offline: a mock model on loopback, the daemon as a real child
// process with the local inbox and the real codex binary, a few chats (some in parallel), the
// status table, and a clean stop that leaves no process behind. SIGINT or SIGTERM (Ctrl-C) ends
// it early the same clean way: the daemon is stopped (a second signal makes it stop at once),
// nothing it ran is left, the temporary directory goes, and Run returns a *Signal.
func Run(ctx context.Context, cfg Config) (err error) {
	stdout := cfg.Stdout
	// Deferred first, so it runs last: after the cleanup below, stop watching for signals and
	// report the signal that cut the demo short instead of the errors it caused.
	sw := watchSignals(ctx)
	ctx = sw.ctx
	defer func() { err = sw.stop(cfg.Stderr, err) }()

	dir, err := os.MkdirTemp("", "codex-warm-demo-")
	if err != nil {
		return err
	}
	if cfg.Keep {
		fmt.Fprintf(stdout, "demo files kept in %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	env, err := prepare(stdout, dir, cfg)
	if err != nil {
		return err
	}
	defer env.mock.Close()
	logFile, err := os.Create(env.logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	d, err := startDaemon(cfg.Supervisor, env, logFile, sw.again)
	if err != nil {
		return err
	}
	// Deferred so that any failure or signal below still leaves nothing running.
	defer d.stopAndSweep(cfg.Stderr, env.stateDir)

	doc, err := waitForDaemon(ctx, env.stateDir, d.exited, 30*time.Second)
	if err != nil {
		return fmt.Errorf("%w (daemon log: %s)", err, tail(env.logPath))
	}
	base := "http://" + doc.Daemon.Listen
	fmt.Fprintf(stdout, "daemon pid %d, local inbox %s\n\n", doc.Daemon.PID, base)
	client := &http.Client{Timeout: 2 * time.Minute}
	defer client.CloseIdleConnections()
	chats := []string{"canvas:demo-workspace", "peer:alpha", "peer:beta"}
	if err := runRounds(ctx, stdout, client, base, chats); err != nil {
		return fmt.Errorf("%w (daemon log: %s)", err, tail(env.logPath))
	}
	if err := demoFiles(ctx, stdout, client, base, env.workspace, env.codexHome, chats[0]); err != nil {
		return fmt.Errorf("%w (daemon log: %s)", err, tail(env.logPath))
	}
	return showAndStop(ctx, stdout, d, env)
}

// signalWatch turns the demo's signals into its ctx's cause: the first cancels ctx, later ones
// go to again, which hurries the daemon's stop.
type signalWatch struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	sigs   chan os.Signal
	again  chan struct{}
	done   chan struct{}
	wg     sync.WaitGroup
}

// watchSignals starts watching SIGINT and SIGTERM, until stop.
func watchSignals(parent context.Context) *signalWatch {
	ctx, cancel := context.WithCancelCause(parent)
	sw := &signalWatch{ctx: ctx, cancel: cancel, sigs: make(chan os.Signal, 2), again: make(chan struct{}, 1), done: make(chan struct{})}
	signal.Notify(sw.sigs, os.Interrupt, syscall.SIGTERM)
	sw.wg.Go(func() {
		for {
			select {
			case sig := <-sw.sigs:
				if ctx.Err() == nil {
					cancel(&Signal{Sig: sig.(syscall.Signal)})
					continue
				}
				select {
				case sw.again <- struct{}{}:
				default:
				}
			case <-sw.done:
				return
			}
		}
	})
	return sw
}

// stop ends the watch, after the demo's cleanup, which still listens to it, and returns the
// demo's error: the signal that cut it short, if one did, instead of the errors it caused.
func (sw *signalWatch) stop(stderr io.Writer, err error) error {
	signal.Stop(sw.sigs)
	close(sw.done)
	sw.wg.Wait()
	sw.cancel(nil)
	var ds *Signal
	if errors.As(context.Cause(sw.ctx), &ds) {
		fmt.Fprintf(stderr, "supervisor demo: interrupted by signal %s; the daemon and its codex children were stopped and the demo's files removed\n", ds.Sig)
		return ds
	}
	return err
}

// demoEnv is the demo's ground: the mock model, and the folders of a temporary directory.
type demoEnv struct {
	mock                                    *mockmodel.Model
	bin                                     string // the codex binary
	codexHome, workspace, stateDir, logPath string
}

// prepare starts the mock model and makes the folders, CODEX_HOME pointing codex at the mock.
func prepare(stdout io.Writer, dir string, cfg Config) (*demoEnv, error) {
	mock, err := mockmodel.New(mockmodel.Config{Latency: cfg.Latency})
	if err != nil {
		return nil, fmt.Errorf("start mock model: %w", err)
	}
	env := &demoEnv{mock: mock, bin: cfg.Codex, codexHome: filepath.Join(dir, "codex-home"), workspace: filepath.Join(dir, "workspace"),
		stateDir: filepath.Join(dir, "state"), logPath: filepath.Join(dir, "daemon.log")}
	for _, d := range []string{env.codexHome, env.workspace} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			mock.Close()
			return nil, err
		}
	}
	if err := mock.WriteCodexHome(env.codexHome); err != nil {
		mock.Close()
		return nil, fmt.Errorf("write codex home: %w", err)
	}
	fmt.Fprintf(stdout, "mock model   %s\ncodex        %s\nstate dir    %s\n\n", mock.URL(), env.bin, env.stateDir)
	return env, nil
}

// daemonProc is the daemon the demo runs as its child process.
type daemonProc struct {
	cmd *exec.Cmd
	// exited closes when the daemon is reaped; waitErr is its exit status, read after exited.
	exited  chan struct{}
	waitErr error
	again   <-chan struct{} // a second signal to the demo
	stopped bool
}

// startDaemon runs `self run` on the local inbox, logging to log.
func startDaemon(self string, env *demoEnv, log *os.File, again <-chan struct{}) (*daemonProc, error) {
	cmd := exec.Command(self, "run", "--inbox", "local", "--listen", "127.0.0.1:0",
		"--state-dir", env.stateDir, "--codex-bin", env.bin, "--cwd", env.workspace, "--log-level", "info")
	cmd.Env = append(os.Environ(), "CODEX_HOME="+env.codexHome)
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group, so a Ctrl-C at the terminal reaches only the demo, which stops the
	// daemon itself. A parent-death signal for when the demo cannot (SIGKILL, a crash): the
	// daemon dies with it, and its codex children with the daemon (theirs). As for codex
	// children, the signal is tied to the thread that starts the daemon, and the runtime only
	// retires a thread whose goroutine exits locked to it, which this program never does.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start daemon: %w", err)
	}
	d := &daemonProc{cmd: cmd, exited: make(chan struct{}), again: again}
	// Ends when the daemon does; stop waits for it (exited).
	go func() {
		d.waitErr = cmd.Wait()
		close(d.exited)
	}()
	return d, nil
}

// stop sends the daemon SIGTERM, and again at a second signal to the demo, and waits for it to
// exit; after 60 seconds it kills the daemon's process group. A second call does nothing.
func (d *daemonProc) stop() error {
	if d.stopped {
		return nil
	}
	d.stopped = true
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	kill := time.NewTimer(60 * time.Second)
	defer kill.Stop()
	for {
		select {
		case <-d.exited:
			return d.waitErr
		case <-d.again:
			// The daemon stops at once on a second SIGTERM, interrupting running turns.
			_ = d.cmd.Process.Signal(syscall.SIGTERM)
		case <-kill.C:
			_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
			<-d.exited
			return errors.New("daemon did not stop within 60s of SIGTERM; killed")
		}
	}
}

// stopAndSweep stops the daemon, then sweeps what it left: a daemon that had to be killed left
// its children to the kernel's parent-death signal and their tools to the next boot sweep.
func (d *daemonProc) stopAndSweep(stderr io.Writer, stateDir string) {
	_ = d.stop()
	swept, _ := supervisor.SweepOrphans(context.Background(), stateDir, time.Second, nil)
	for _, sc := range swept {
		if sc.Action != childproc.SweepGone || sc.Remains > 0 {
			fmt.Fprintf(stderr, "supervisor demo: codex child %d was still running after the daemon stopped: %s\n", sc.PID, sc.Action)
		}
	}
}

// runRounds sends the demo's chats their messages, round by round, and prints each reply and
// its latency.
func runRounds(ctx context.Context, stdout io.Writer, client *http.Client, base string, chats []string) error {
	rounds := []struct {
		title    string
		parallel bool
		msgs     []demoMsg
	}{
		{"first message of three chats, in parallel (each starts a codex child)", true, []demoMsg{
			{chats[0], "hello from the canvas"}, {chats[1], "hi, alpha here"}, {chats[2], "hi, beta here"}}},
		{"second message of each chat, in parallel (warm children, history kept)", true, []demoMsg{
			{chats[0], "what did I say before?"}, {chats[1], "alpha again"}, {chats[2], "beta again"}}},
		{"three more messages on one chat, one after another (warm)", false, []demoMsg{
			{chats[0], "third"}, {chats[0], "fourth"}, {chats[0], "fifth"}}},
	}
	for _, r := range rounds {
		fmt.Fprintf(stdout, "== %s\n", r.title)
		results := make([]demoResult, len(r.msgs))
		roundStart := time.Now()
		if r.parallel {
			var wg sync.WaitGroup
			for i, m := range r.msgs {
				wg.Go(func() { results[i] = sendDemo(ctx, client, base, m) })
			}
			wg.Wait()
		} else {
			for i, m := range r.msgs {
				results[i] = sendDemo(ctx, client, base, m)
			}
		}
		for _, res := range results {
			if res.err != nil {
				return fmt.Errorf("chat %s: %w", res.msg.chat, res.err)
			}
			fmt.Fprintf(stdout, "  %-22s %6.0f ms  %s\n", res.msg.chat, float64(res.latency.Microseconds())/1000, oneLine(res.reply.Text))
		}
		fmt.Fprintf(stdout, "  round wall time %.0f ms\n\n", float64(time.Since(roundStart).Microseconds())/1000)
	}
	return nil
}

// showAndStop prints the status table, stops the daemon and checks that none of its codex
// children is left.
func showAndStop(ctx context.Context, stdout io.Writer, d *daemonProc, env *demoEnv) error {
	doc, err := control.NewClient(env.stateDir).Status(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "== supervisor status")
	control.Render(stdout, doc, time.Now())
	fmt.Fprintln(stdout)

	var pids []int
	for _, c := range doc.Snapshot.Children {
		pids = append(pids, c.PID)
	}
	if err := d.stop(); err != nil {
		return fmt.Errorf("daemon exit: %w (log: %s)", err, tail(env.logPath))
	}
	var left []int
	for _, pid := range pids {
		if syscall.Kill(pid, 0) == nil {
			left = append(left, pid)
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("codex children still running after the daemon stopped: %v", left)
	}
	fmt.Fprintf(stdout, "daemon stopped on SIGTERM; its %d codex children exited; no process left behind\n", len(pids))
	return nil
}

// demoFiles shows the agent sending a file back (send_file): one from the chat's own folder
// arrives with the reply, one outside it is refused and named.
func demoFiles(ctx context.Context, stdout io.Writer, client *http.Client, base, workspace, codexHome, chat string) error {
	fmt.Fprintln(stdout, "== the agent sends files back (send_file): one from the chat's folder, one from CODEX_HOME")
	dir := chatfiles.Folder(workspace, chat)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.txt"), []byte("quarterly numbers: 42\n"), 0o600); err != nil {
		return err
	}
	for _, path := range []string{"report.txt", filepath.Join(codexHome, "config.toml")} {
		res := sendDemo(ctx, client, base, demoMsg{chat, mockmodel.KeywordSendFile + " " + path})
		if res.err != nil {
			return fmt.Errorf("chat %s: %w", chat, res.err)
		}
		fmt.Fprintf(stdout, "  %-22s %6.0f ms  %s\n", chat, float64(res.latency.Microseconds())/1000, oneLine(res.reply.Text))
		for _, f := range res.reply.Files {
			fmt.Fprintf(stdout, "  %-22s           file %s (%s, %d bytes): %q\n", "", f.Name, f.MimeType, f.Size, f.Data)
		}
	}
	fmt.Fprintln(stdout)
	return nil
}

type demoMsg struct{ chat, text string }

type demoResult struct {
	msg     demoMsg
	reply   local.Reply
	latency time.Duration
	err     error
}

func sendDemo(ctx context.Context, client *http.Client, base string, m demoMsg) demoResult {
	res := demoResult{msg: m}
	body, _ := json.Marshal(local.Message{Text: m.text})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chats/"+m.chat+"/messages", bytes.NewReader(body))
	if err != nil {
		res.err = err
		return res
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		res.err = err
		return res
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	res.latency = time.Since(start)
	if resp.StatusCode != http.StatusOK {
		res.err = fmt.Errorf("local inbox answered %s: %s", resp.Status, strings.TrimSpace(string(raw)))
		return res
	}
	if err := json.Unmarshal(raw, &res.reply); err != nil {
		res.err = fmt.Errorf("decode reply: %w", err)
	}
	return res
}

// waitForDaemon polls the control socket until the daemon answers, exits, or the timeout passes.
func waitForDaemon(ctx context.Context, stateDir string, exited <-chan struct{}, timeout time.Duration) (control.StatusDoc, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		doc, err := control.NewClient(stateDir).Status(ctx)
		if err == nil && doc.Daemon.Listen != "" {
			return doc, nil
		}
		select {
		case <-exited:
			return control.StatusDoc{}, errors.New("daemon exited before it was ready")
		case <-deadline.C:
			return control.StatusDoc{}, fmt.Errorf("daemon not ready after %s", timeout)
		case <-ctx.Done():
			return control.StatusDoc{}, ctx.Err()
		case <-tick.C:
		}
	}
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 90 {
		s = s[:90] + "…"
	}
	return s
}

// tail returns the end of a log file for error messages.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return path
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return path + ":\n" + string(b)
}

// Signal is the error of a demo cut short by a signal.
type Signal struct{ Sig syscall.Signal }

func (d *Signal) Error() string { return "interrupted by signal " + d.Sig.String() }
