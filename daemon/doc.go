// Package daemon is `supervisor run`: its configuration (Config, ParseFlags), the assembly of
// the pool, the inboxes, the control socket, the metrics and the health probes, and their
// lifecycle: start-up checks, the login gate, systemd's notifications, the stop on a signal or
// on the control socket, and the reload in place (the sequence itself is package reload; this
// package gives it its steps).
//
// The binary parses the command line and calls Run (or ReloadPreflight, the hidden command a
// daemon runs its successor with); it serves the process's main thread (MainThread), on which
// the daemon forks its codex children and re-executes itself.
package daemon
