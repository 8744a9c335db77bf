package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/molecule-ai/codex-warm/internal/daemon"
)

// commandSummary is what `supervisor <command> -h` says above the flags.
func commandSummary(name string) string {
	switch name {
	case "run":
		return `Runs the daemon: it keeps one warm codex app-server child per chat and answers messages
from the Molecule platform (MOLECULE_API_URL or PLATFORM_URL set) or from the local HTTP inbox (--listen). SIGTERM
drains running turns (--drain-timeout); a second SIGTERM stops at once. Most flags have an
environment fallback, named after the flag's text. Check the set-up first: "supervisor doctor".`
	case "status":
		return `Prints the live process table of the daemon running on --state-dir: one row per codex child
(chat, thread, pid, state, memory) and the totals. Exit status 3 when no daemon runs there.
--health and --ready ask the daemon's /healthz and /readyz instead (exit 0 when up / ready).`
	case "demo":
		return `Runs an offline demo: a mock model on loopback, the real codex binary, the daemon with its local
inbox and three chats. Nothing leaves the machine and no login is needed.`
	case "doctor":
		return "Checks what `supervisor run` would use, with the same flags and environment: the codex binary\n" +
			"and its login, CODEX_HOME, bubblewrap, the state directory, sessions.json, the listen address,\n" +
			"the Molecule platform and the memory budget. One line per check: ✓ fine, ! warning, ✗ failed,\n" +
			"- not used, each with the fix. Exit status 1 when a check failed."
	case "reload":
		return `Replaces the daemon running on --state-dir with the binary now on disk, in place: same pid,
same warm codex children, callers whose turns cross get their answers. The new binary is checked
first (the same start checks as run); one that fails them, or does not take over in time, gives
everything back. Waits for the outcome (--wait); exit status 1 when the reload was refused or failed.`
	case "stop":
		return `Stops the daemon running on --state-dir as SIGTERM does (running turns drain, --drain-timeout)
and waits until it exited (--wait). It is the systemd unit's ExecStop=: unlike a signal, it
cannot land in the moment of a reload's exec. A state directory with no daemon is already stopped (exit 0).`
	case "archive":
		return `Runs the retention sweep once: archives the codex threads of chats idle --idle-after, deletes
threads archived --delete-after ago (this frees disk), removes uploads older than --uploads-after.
Through the running daemon when there is one, else on --state-dir under its lock.`
	case "mock-model":
		return `Runs the mock model (a Responses API on loopback that answers "reply #N: <your text>") and
prints the CODEX_HOME config.toml and the environment that point codex at it, so the daemon can
be tried without an OpenAI account. Ctrl-C stops it.`
	}
	return ""
}

// newCommandFlags returns the flag set of a command, writing errors and help to stderr. Its help
// starts with the command's usage line and commandSummary.
func newCommandFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: supervisor %s [flags]\n\n%s\n\nflags:\n", name, commandSummary(name))
		fs.PrintDefaults()
	}
	return fs
}

// flagsError turns a flag parsing error into the exit status: 0 for -h (help was asked for and
// printed), 2 for a usage error (already printed with the usage).
func flagsError(err error) error { return daemon.FlagsError(err) }
