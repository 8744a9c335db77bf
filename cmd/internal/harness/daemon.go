package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"syscall"
	"time"
)

// ErrNotExited is wrapped by Wait and Terminate when the daemon was still running when they gave
// up, as opposed to the daemon's own exit status.
var ErrNotExited = errors.New("daemon did not exit")

// DaemonConfig is how a daemon process is started.
type DaemonConfig struct {
	// Bin is the supervisor binary and Args its arguments (usually "run", ...).
	Bin  string
	Args []string
	// Env is the daemon's whole environment and Dir its working directory.
	Env []string
	Dir string
	// Output receives the daemon's stdout and stderr. An *os.File is handed over as is and may
	// be closed once Start returned; any other writer is fed by a copying goroutine that Wait
	// (of the process) waits for.
	Output io.Writer
	// Pdeathsig, when not 0, is sent to the daemon if the starting process dies first, so that a
	// tool killed outright still makes the daemon drain and stop its children.
	Pdeathsig syscall.Signal
	// WaitDelay bounds how long the reap waits for Output's copying after the exit (0: no bound).
	WaitDelay time.Duration
}

// Daemon is one started daemon process. It leads its own process group, as under a service
// manager: a kill of the group reaches it and nothing else of the tool (its codex children lead
// groups of their own and outlive it, as in production). One goroutine owned by the Daemon reaps
// it; Exited is closed once it was reaped.
type Daemon struct {
	pid     int
	cmd     *exec.Cmd
	exited  chan struct{}
	exitErr error // valid once exited is closed
	killed  bool
}

// StartDaemon starts the daemon process. It does not wait for the daemon to be ready; see
// AwaitReady.
func StartDaemon(cfg DaemonConfig) (*Daemon, error) {
	cmd := exec.Command(cfg.Bin, cfg.Args...)
	cmd.Env = cfg.Env
	cmd.Dir = cfg.Dir
	cmd.Stdout, cmd.Stderr = cfg.Output, cfg.Output
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: cfg.Pdeathsig}
	cmd.WaitDelay = cfg.WaitDelay
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start daemon %s: %w", cfg.Bin, err)
	}
	d := &Daemon{pid: cmd.Process.Pid, cmd: cmd, exited: make(chan struct{})}
	go func() {
		d.exitErr = cmd.Wait()
		close(d.exited)
	}()
	return d, nil
}

// PID is the daemon's process id, which is also its process group id.
func (d *Daemon) PID() int { return d.pid }

// Exited is closed once the daemon was reaped.
func (d *Daemon) Exited() <-chan struct{} { return d.exited }

// ExitErr is the daemon's exit status as exec reports it (nil: status 0). It is valid once
// Exited is closed.
func (d *Daemon) ExitErr() error { return d.exitErr }

// Alive reports whether the daemon was not reaped yet.
func (d *Daemon) Alive() bool {
	select {
	case <-d.exited:
		return false
	default:
		return true
	}
}

// Killed reports whether Kill signalled the daemon (it was alive then).
func (d *Daemon) Killed() bool { return d.killed }

// Wait waits for the reap. When ctx ends first the error wraps ErrNotExited and ctx's error.
func (d *Daemon) Wait(ctx context.Context) error {
	select {
	case <-d.exited:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("daemon %d: %w: %w", d.pid, ErrNotExited, ctx.Err())
	}
}

// Kill SIGKILLs the daemon's process group and waits until the daemon was reaped. The group id
// is the daemon's pid, which stays reserved until the reap, so the signal cannot reach a
// stranger.
func (d *Daemon) Kill(ctx context.Context) error {
	if d.Alive() {
		d.killed = true
		if err := syscall.Kill(-d.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("kill daemon group %d: %w", d.pid, err)
		}
	}
	return d.Wait(ctx)
}

// Terminate sends SIGTERM (the daemon drains) and waits up to timeout for the exit. It reports
// how long the exit took and the exit status (nil: status 0); an error wrapping ErrNotExited
// means the daemon still runs.
func (d *Daemon) Terminate(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil && d.Alive() {
		return 0, fmt.Errorf("signal daemon %d: %w", d.pid, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := d.Wait(ctx); err != nil {
		return time.Since(start), err
	}
	return time.Since(start), d.exitErr
}

// AwaitReady polls the daemon's status every interval until it reports this daemon's pid and
// ready(doc) holds (nil ready: the pid is enough), and returns that status. It stops early when
// the daemon exits; callers tell that case apart with Alive.
func (d *Daemon) AwaitReady(ctx context.Context, status StatusClient, interval time.Duration, ready func(StatusDoc) bool) (StatusDoc, error) {
	var doc StatusDoc
	err := PollUntil(ctx, interval, func(ctx context.Context) (bool, error) {
		if !d.Alive() {
			return true, nil
		}
		got, err := status.Get(ctx)
		if err != nil {
			return false, err
		}
		if got.Daemon.PID != d.pid || (ready != nil && !ready(got)) {
			return false, fmt.Errorf("status of pid %d does not show daemon %d ready yet", got.Daemon.PID, d.pid)
		}
		doc = got
		return true, nil
	})
	if err == nil && !d.Alive() {
		err = fmt.Errorf("daemon %d exited before it was ready (%v)", d.pid, d.exitErr)
	}
	return doc, err
}

// PollUntil checks cond at once and then every interval until it reports true or ctx ends; then
// the error wraps ctx's and the last error cond returned (errors do not stop the polling). It is
// for conditions a tool cannot be notified of, such as a process's state or the daemon's status.
func PollUntil(ctx context.Context, interval time.Duration, cond func(context.Context) (bool, error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		ok, err := cond(ctx)
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
			}
			return ctx.Err()
		case <-t.C:
		}
	}
}
