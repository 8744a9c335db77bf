package main

import (
	"strings"

	"github.com/molecule-ai/codex-warm/internal/control"
	"github.com/molecule-ai/codex-warm/internal/daemon/reload"
)

// What the end-to-end tests read in the daemon's status and environment, named as the daemon
// names it.

const (
	reloadOK      = string(reload.OK)
	reloadRefused = string(reload.Refused)
	reloadFailed  = string(reload.Failed)
	reloadRunning = string(reload.Running)
	// reloadStarting is the outcome the new image shows from its takeover until it serves.
	reloadStarting = string(reload.Starting)

	CodexNotLoggedIn = control.CodexNotLoggedIn
)

// platformLoginEnv are the variables a Molecule codex workspace gets the org's login in (the
// codex template's start.sh); no codex child may see them.
var platformLoginEnv = []string{"CODEX_AUTH_JSON", "CODEX_CHATGPT_AUTH_JSON"}

// serviceManagerEnv are the variables systemd gives the daemon to talk to it; no codex child may
// see them.
func serviceManagerEnv() []string { return []string{"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"} }

// lookupEnv is the last value of key in env ("" when unset), as a process reads it.
func lookupEnv(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}
