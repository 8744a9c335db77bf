package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// daemonConfig is how every daemon of a soak is started; each start is a restart of the same
// daemon (same state directory, same environment).
type daemonConfig struct {
	Bin  string
	Args []string
	Env  []string
	Dir  string
}

// daemonProc is one started daemon process. Its waiter goroutine is the only caller of Wait;
// exited is closed when the process was reaped.
type daemonProc struct {
	n       int
	pid     int
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error // valid once exited is closed
	// killed says the harness SIGKILLed it on purpose.
	killed bool
}

// startDaemon starts daemon number n with its output in logPath. The daemon leads its own
// process group, as under a service manager: a kill of the group reaches it and nothing else of
// the soak. (Its codex children lead groups of their own and survive it, as in production.)
func startDaemon(cfg daemonConfig, n int, logPath string) (*daemonProc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("daemon log: %w", err)
	}
	defer f.Close()
	cmd := exec.Command(cfg.Bin, cfg.Args...)
	cmd.Env = cfg.Env
	cmd.Dir = cfg.Dir
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start daemon %s: %w", cfg.Bin, err)
	}
	d := &daemonProc{n: n, pid: cmd.Process.Pid, logPath: logPath, cmd: cmd, exited: make(chan struct{})}
	go func() {
		d.waitErr = cmd.Wait()
		close(d.exited)
	}()
	return d, nil
}

// alive reports whether the process was not reaped yet.
func (d *daemonProc) alive() bool {
	select {
	case <-d.exited:
		return false
	default:
		return true
	}
}

// kill SIGKILLs the daemon's process group and waits until the daemon was reaped. The group id is
// the daemon's pid, which stays reserved until the reap, so the signal cannot reach a stranger.
func (d *daemonProc) kill(ctx context.Context) error {
	if d.alive() {
		d.killed = true
		if err := syscall.Kill(-d.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("kill daemon group %d: %w", d.pid, err)
		}
	}
	return d.wait(ctx)
}

// terminate sends SIGTERM (graceful drain) and waits up to timeout for the exit. It reports how
// long the exit took and the exit error (nil: status 0).
func (d *daemonProc) terminate(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil && d.alive() {
		return 0, fmt.Errorf("signal daemon %d: %w", d.pid, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := d.wait(ctx); err != nil {
		return time.Since(start), err
	}
	return time.Since(start), d.waitErr
}

// wait waits for the reap.
func (d *daemonProc) wait(ctx context.Context) error {
	select {
	case <-d.exited:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("daemon %d did not exit: %w", d.pid, ctx.Err())
	}
}
