package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/molecule-ai/codex-warm/internal/control"
	"github.com/molecule-ai/codex-warm/internal/daemon"
	"github.com/molecule-ai/codex-warm/internal/health"
)

// cmdStatus prints the running daemon's status: its process table (control.Render), or with
// --json the document itself, or with --health / --ready only its probe.
func cmdStatus(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newCommandFlags("status", stderr)
	stateDir := fs.String("state-dir", daemon.DefaultStateDir(getenv), "state directory of the daemon (env CODEX_CHANNEL_MOLECULE_STATE_DIR)")
	asJSON := fs.Bool("json", false, "print the raw status document as JSON")
	live := fs.Bool("health", false, "only ask the daemon's liveness probe (/healthz): exit 0 when it answers")
	ready := fs.Bool("ready", false, "only ask the daemon's readiness probe (/readyz): exit 0 when ready, 1 with the reason when not")
	if err := fs.Parse(args); err != nil {
		return flagsError(err)
	}
	if *live || *ready {
		return probeDaemon(ctx, *stateDir, *ready, stdout, stderr)
	}
	doc, err := control.NewClient(*stateDir).Status(ctx)
	if err != nil {
		return newStatusFailure(*stateDir, err).report(stdout, stderr, *asJSON)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(doc)
	}
	control.Render(stdout, doc, time.Now())
	return nil
}

// probeDaemon asks the daemon's control socket for its liveness (or, with ready, readiness)
// probe and prints the answer: exit 0 when live / ready, 1 when not, 3 when no daemon runs, 4
// when what answered is not the daemon's probe (statusExit*).
// It needs neither the inbox's address nor its token, which makes it the container's
// HEALTHCHECK.
func probeDaemon(ctx context.Context, stateDir string, ready bool, stdout, stderr io.Writer) error {
	verb := control.VerbLive
	if ready {
		verb = control.VerbReady
	}
	c := control.NewClient(stateDir)
	code, body, err := c.Do(ctx, verb, nil, health.DefaultTimeout+5*time.Second)
	if err != nil {
		return newStatusFailure(stateDir, err).report(stdout, stderr, false)
	}
	if !ready {
		if code != http.StatusOK {
			fmt.Fprintf(stderr, "supervisor status: the daemon's liveness probe answered HTTP %d: %s\n", code, control.Excerpt(body))
			return exitCode(statusExitNotReady)
		}
		fmt.Fprintln(stdout, "ok")
		return nil
	}
	var rep health.Report
	if err := json.Unmarshal(body, &rep); err != nil {
		err = fmt.Errorf("the readiness probe at %s answered HTTP %d: %s", c.Path(), code, control.Excerpt(body))
		return newStatusFailure(stateDir, err).report(stdout, stderr, false)
	}
	if rep.Ready() {
		fmt.Fprintln(stdout, health.StatusReady)
		return nil
	}
	fmt.Fprintf(stdout, "%s: %s\n", health.StatusNotReady, rep.Reason)
	return exitCode(statusExitNotReady)
}
