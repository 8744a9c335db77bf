// Command supervisor is the warm-session codex daemon: it keeps one long-lived `codex app-server`
// child per chat thread and answers chat messages from the Molecule platform or a local HTTP inbox.
//
// Usage:
//
//	supervisor run      the daemon
//	supervisor status   the live process table of a running daemon
//	supervisor reload   replace the running daemon with the binary on disk (as SIGHUP does)
//	supervisor stop     stop the running daemon (as SIGTERM does) and wait for its exit
//	supervisor demo     a self-contained offline demo (mock model, real codex)
//	supervisor doctor   check what run would use, one line per check with the fix
//	supervisor mock-model  a mock model on loopback, to try the daemon without an account
//	supervisor version
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"

	"github.com/molecule-ai/codex-warm/internal/daemon"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `usage: supervisor <command> [flags]

commands:
  run         run the daemon (Molecule platform or local inbox)
  status      print the live process table of the running daemon
  reload      replace the running daemon with the binary now on disk, keeping its codex children
  stop        stop the running daemon as SIGTERM does, and wait until it exited
  archive     archive the threads of long-idle chats and delete old archived ones, once (--idle-after 30d, --delete-after 90d, --dry-run)
  demo        run an offline demo: mock model on loopback, real codex, local inbox
  doctor      check what run would use (codex, login, state dir, listen address, platform)
  mock-model  run a mock model on loopback and print the CODEX_HOME config that uses it
  version     print the version

Run "supervisor <command> -h" for the flags of a command.
`

// The daemon forks its codex children, and re-executes itself, on the process's main thread
// (daemon.MainThread): locking the main goroutine to the main thread in init is the documented
// way to keep package main on it.
func init() { runtime.LockOSThread() }

func main() {
	mt := daemon.NewMainThread()
	os.Exit(mt.Serve(func() int {
		return runMainOn(context.Background(), mt, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	}))
}

// runMain dispatches a subcommand and returns the process exit code. It takes its environment and
// streams as arguments so tests can drive it in-process.
func runMain(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	return runMainOn(ctx, nil, args, getenv, stdout, stderr)
}

// runMainOn is runMain for a process whose main thread mt serves (nil: none; the daemon then
// cannot reload in place).
func runMainOn(ctx context.Context, mt *daemon.MainThread, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "run":
		err = daemon.Run(ctx, daemon.Program{Version: version, Args: args[1:], Flags: newCommandFlags, MainThread: mt,
			Getenv: getenv, Stdout: stdout, Stderr: stderr})
	case "reload":
		err = cmdReload(ctx, args[1:], getenv, stdout, stderr)
	case "stop":
		err = cmdStop(ctx, args[1:], getenv, stdout, stderr)
	case daemon.ReloadPreflightCmd:
		return daemon.ReloadPreflight(ctx, daemon.Program{Version: version, Args: args[1:], Flags: newCommandFlags,
			Getenv: getenv, Stdout: stdout, Stderr: stderr}, os.Stdin)
	case "archive":
		err = cmdArchive(ctx, args[1:], getenv, stdout, stderr)
	case "status":
		err = cmdStatus(ctx, args[1:], getenv, stdout, stderr)
	case "demo":
		err = cmdDemo(ctx, args[1:], getenv, stdout, stderr)
	case "doctor":
		err = cmdDoctor(ctx, args[1:], getenv, stdout, stderr)
	case "mock-model":
		err = cmdMockModel(ctx, args[1:], getenv, stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintf(stdout, "supervisor %s\n", version)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "supervisor: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if err == nil {
		return 0
	}
	if ec, ok := err.(exitCode); ok {
		return int(ec)
	}
	fmt.Fprintf(stderr, "supervisor %s: %v\n", args[0], err)
	return 1
}

// exitCode is returned by a command that already reported its failure (for example flag parsing)
// and only needs the process to exit with that code.
type exitCode = daemon.ExitCode
