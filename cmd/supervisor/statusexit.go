package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/molecule-ai/codex-warm/internal/control"
)

// Exit codes of `supervisor status`, one convention for the table, --json and the probes
// (docs/operating.md, "supervisor status"). They follow the LSB init-script status codes where those fit,
// so service managers and scripts read them as they read any service's status: 0 the daemon
// answered (and is live / ready), 2 a wrong flag or argument (flagsError), and:
const (
	// statusExitNotReady: the daemon answered that it is not live (--health) or not ready
	// (--ready).
	statusExitNotReady = 1
	// statusExitNotRunning: no daemon can be running on the state directory: no control
	// socket, a stale one nobody listens on, or a path that cannot hold one.
	statusExitNotRunning = 3
	// statusExitUnknown: the socket could not be asked, or what answered is not the daemon's
	// answer (permission denied, a timeout, an HTTP error, a document that does not decode).
	statusExitUnknown = 4
)

// statusFailure is why `supervisor status` has no answer from a daemon. It is printed as one
// sentence on stderr, or with --json as {"error": …} on stdout, and exits with ExitCode.
type statusFailure struct {
	// Reason is "not_running" (exit 3) or "unknown" (exit 4).
	Reason   string `json:"reason"`
	Message  string `json:"message"`
	StateDir string `json:"state_dir"`
	ExitCode int    `json:"exit_code"`
}

// newStatusFailure classifies err, an error of asking the daemon owning dir.
func newStatusFailure(dir string, err error) statusFailure {
	f := statusFailure{Reason: "unknown", Message: err.Error(), StateDir: dir, ExitCode: statusExitUnknown}
	if errors.Is(err, control.ErrNoDaemon) {
		f.Reason, f.ExitCode = "not_running", statusExitNotRunning
	}
	return f
}

// report prints f (as JSON on stdout with asJSON, else as a sentence on stderr) and returns the
// exit code as an error for runMain.
func (f statusFailure) report(stdout, stderr io.Writer, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			Error statusFailure `json:"error"`
		}{f}); err != nil {
			return fmt.Errorf("write status error: %w", err)
		}
	} else {
		fmt.Fprintf(stderr, "supervisor status: %s\n", f.Message)
	}
	return exitCode(f.ExitCode)
}
