package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"

	"github.com/molecule-ai/codex-warm/internal/childproc"
	"github.com/molecule-ai/codex-warm/internal/control"
	"github.com/molecule-ai/codex-warm/internal/daemon"
)

// cmdStop asks the running daemon to stop (as SIGTERM does) and waits until its process is
// gone. A service manager's ExecStop= runs it: unlike a signal, the request cannot meet the
// moments of a reload in which a signal ends the daemon (docs/HANDOFF.md): connections wait in
// the control socket's backlog while the image changes, and the image that answers drains.
func cmdStop(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newCommandFlags("stop", stderr)
	stateDir := fs.String("state-dir", daemon.DefaultStateDir(getenv), "state directory of the daemon (env CODEX_CHANNEL_MOLECULE_STATE_DIR)")
	wait := fs.Duration("wait", 5*time.Minute, "how long to wait for the daemon to exit (it lets running turns finish first, up to its --drain-timeout)")
	if err := fs.Parse(args); err != nil {
		return flagsError(err)
	}
	c := control.NewClient(*stateDir)
	before, err := c.Status(ctx)
	if errors.Is(err, control.ErrNoDaemon) {
		fmt.Fprintf(stdout, "no daemon runs on %s\n", *stateDir)
		return nil
	}
	if err != nil {
		return err
	}
	pid := before.Daemon.PID
	// A daemon gone meanwhile is stopped too.
	var refused *control.Error
	switch err := c.Stop(ctx); {
	case errors.As(err, &refused):
		return fmt.Errorf("stop refused: HTTP %d: %s", refused.Status, refused.Msg)
	case err != nil && !errors.Is(err, control.ErrNoDaemon):
		return err
	}
	fmt.Fprintf(stdout, "stopping pid %d; waiting for it to exit\n", pid)
	wctx, cancel := context.WithTimeout(ctx, *wait)
	defer cancel()
	t := time.NewTicker(reloadPoll)
	defer t.Stop()
	for !processGone(pid) {
		select {
		case <-wctx.Done():
			return fmt.Errorf("pid %d still runs %s after the stop (see the daemon's log)", pid, *wait)
		case <-t.C:
		}
	}
	fmt.Fprintf(stdout, "stopped: pid %d exited\n", pid)
	return nil
}

// processGone reports whether pid no longer runs (gone, or a zombie waiting for its parent).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	st, err := childproc.ProcFS{}.Stat(pid)
	return err != nil || st.State == 'Z'
}
