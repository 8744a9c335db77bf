package main

import (
	"fmt"
	"os"

	"github.com/molecule-ai/codex-warm/cmd/internal/harness"
)

// daemonProc is one started daemon process: the nth of the soak, logging to logPath.
type daemonProc struct {
	*harness.Daemon
	n       int
	logPath string
}

// startDaemon starts daemon number n with its output in logPath. Every start is a restart of the
// same daemon: cfg (state directory, environment) is the same each time.
func startDaemon(cfg harness.DaemonConfig, n int, logPath string) (*daemonProc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("daemon log: %w", err)
	}
	defer f.Close()
	cfg.Output = f
	d, err := harness.StartDaemon(cfg)
	if err != nil {
		return nil, err
	}
	return &daemonProc{Daemon: d, n: n, logPath: logPath}, nil
}
