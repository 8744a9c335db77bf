// Package daemon is `supervisor run`: its configuration (Config, ParseFlags), the assembly of
// the pool, the inboxes, the control socket, the metrics and the health probes, and their
// lifecycle: start-up checks, the login gate, systemd's notifications, the stop on a signal or
// on the control socket, the reload in place (the sequence itself is package reload; this
// package gives it its steps, and a new image's takeover with its bound), the init a daemon
// started as PID 1 is for itself, and the retention sweep (its flags, its control verb, and the
// sweep `supervisor archive` runs when no daemon does).
//
// Run's flags are registered by groups, one file each (flags_*.go, flagGroups), as
// docs/configuration.md has them in sections. The running daemon is components, each a Run(ctx)
// error that owns its goroutines, which runStages starts together and stops in the order
// shutdownOrder lists.
//
// The binary parses the command line and calls Run (or ReloadPreflight, the hidden command a
// daemon runs its successor with); it serves the process's main thread (MainThread), on which
// the daemon forks its codex children and re-executes itself.
package daemon
