package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/molecule-ai/codex-warm/internal/control"
	"github.com/molecule-ai/codex-warm/internal/daemon"
	"github.com/molecule-ai/codex-warm/internal/daemon/reload"
)

// reloadPoll is how often `supervisor reload` asks for the outcome.
const reloadPoll = 200 * time.Millisecond

// cmdReload asks the running daemon to reload (as SIGHUP does) and waits for the outcome: the
// new image's status, or the old image's reason for serving on.
func cmdReload(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newCommandFlags("reload", stderr)
	stateDir := fs.String("state-dir", daemon.DefaultStateDir(getenv), "state directory of the daemon (env CODEX_CHANNEL_MOLECULE_STATE_DIR)")
	wait := fs.Duration("wait", 5*time.Minute, "how long to wait for the outcome (the daemon lets running turns finish first, up to its --drain-timeout)")
	if err := fs.Parse(args); err != nil {
		return flagsError(err)
	}
	c := control.NewClient(*stateDir)
	before, err := c.Status(ctx)
	if err != nil {
		return err
	}
	ans, err := c.Reload(ctx)
	var refused *control.Error
	if errors.As(err, &refused) {
		return fmt.Errorf("reload refused: %s", refused.Msg)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "reload %d of pid %d (version %s) started; waiting for the outcome\n", ans.Attempt, before.Daemon.PID, before.Daemon.Version)
	wctx, cancel := context.WithTimeout(ctx, *wait)
	defer cancel()
	t := time.NewTicker(reloadPoll)
	defer t.Stop()
	for {
		// While the image changes, the socket's backlog holds the connection, or the old
		// image's last answer is cut: both are retried.
		doc, err := c.Status(wctx)
		if err == nil {
			if r := doc.Daemon.LastReload; r != nil && r.Attempt >= ans.Attempt && r.Outcome != string(reload.Running) && r.Outcome != string(reload.Starting) {
				if r.Outcome != string(reload.OK) {
					return fmt.Errorf("reload %s: %s; the daemon (pid %d, version %s) serves on", r.Outcome, r.Error, doc.Daemon.PID, doc.Daemon.Version)
				}
				fmt.Fprintf(stdout, "reloaded: pid %d now runs version %s (was %s), %d warm children kept, %d reloads since %s\n",
					doc.Daemon.PID, r.To, r.From, r.Children, doc.Daemon.Reloads, doc.Daemon.Started.Format(time.RFC3339))
				return nil
			}
		} else if errors.Is(err, control.ErrNoDaemon) {
			return fmt.Errorf("the daemon is gone during the reload: %w", err)
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("no outcome of reload %d within %s (see the daemon's log)", ans.Attempt, *wait)
		case <-t.C:
		}
	}
}
