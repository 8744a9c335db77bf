package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/molecule-ai/codex-warm/internal/atomicfile"
	"github.com/molecule-ai/codex-warm/internal/control"
	"github.com/molecule-ai/codex-warm/internal/health"
)

// Phases of a daemon, for the "inbox" readiness check.
const (
	phaseStarting int32 = iota
	phaseServing
	phaseDraining
)

// readiness is the daemon's readiness probe, served by the local inbox and the control socket:
// the inbox is serving (not starting, not draining), the state directory takes a new file, the
// codex binary is still there, the platform accepts the Molecule workspace, and codex is logged in (a state that is not "logged in" is
// checked again at most every loginRecheckEvery).
func (d *daemon) readiness(bin, codexHome string) *health.Readiness {
	return health.NewReadiness(health.Config{Checks: []health.Check{
		{Name: "inbox", Run: func(context.Context) error {
			switch d.phase.Load() {
			case phaseServing:
				return nil
			case phaseDraining:
				return errors.New("draining: the daemon is stopping")
			}
			return errors.New("starting")
		}},
		{Name: "state_dir", Run: func(context.Context) error { return atomicfile.CheckWritable(d.cfg.StateDir) }},
		{Name: "codex", Run: func(context.Context) error { return checkExecutable(bin) }},
		{Name: "model", Run: func(context.Context) error {
			// Known from the turns: not ready from a turn that could not reach the model until
			// one gets through (the Molecule inbox tries its waiting messages again by itself).
			if m := d.sup.Model(); m.Unreachable {
				return fmt.Errorf("the model service could not be reached since %s: %s", m.Since.UTC().Format(time.RFC3339), m.Cause)
			}
			return nil
		}},
		{Name: "platform", Run: func(context.Context) error {
			// A SaaS tenant's guard (or a deleted workspace) refusing the workspace's feed: register
			// and heartbeat pass, nothing is answered.
			if m := d.molecule(); m != nil {
				return m.Refused()
			}
			return nil
		}},
		{Name: "codex_login", Run: func(ctx context.Context) error {
			if t := d.login.tokens; t != nil {
				// The daemon holds the login: it knows better than account/read, which offline
				// may fail ("workspace routing discovery failed") while turns work.
				if err := t.Usable(); err != nil {
					return fmt.Errorf("%w (CODEX_HOME=%s)", err, codexHome)
				}
				if st := t.Status(); st.WriteBackError != "" {
					// Not ready, yet alive: a restart would lose the only copy of the live token.
					return fmt.Errorf("the refreshed ChatGPT login cannot be written back to auth.json (%s): the daemon holds the only copy "+
						"of the live refresh token and retries; free space or fix permissions in CODEX_HOME=%s, do not restart the daemon", st.WriteBackError, codexHome)
				}
				return nil
			}
			a := d.login.refresh(ctx, func(a control.CodexAuth) bool { return a.State != control.CodexLoggedIn })
			switch a.State {
			case control.CodexLoggedIn:
				return nil
			case control.CodexNotLoggedIn:
				return fmt.Errorf("codex is not logged in: run `codex login` as the daemon's user with CODEX_HOME=%s", codexHome)
			}
			return fmt.Errorf("codex login state unknown: %s", a.Detail)
		}},
	}})
}

// checkExecutable reports whether bin is still an executable regular file.
func checkExecutable(bin string) error {
	fi, err := os.Stat(bin)
	if err != nil {
		return fmt.Errorf("codex binary: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("codex binary %s is not an executable file (mode %s)", bin, fi.Mode())
	}
	return nil
}
