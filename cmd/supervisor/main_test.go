package main

import (
	"context"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/molecule-ai/codex-warm/internal/daemon"
)

// daemonEnv selects the helper-process mode: when it is "1" the test binary is the supervisor
// binary (it runs runMain on its arguments and exits), so the end-to-end tests start the daemon
// as a real process, with real signals, without building it separately.
const daemonEnv = "CODEX_WARM_E2E_DAEMON"

func TestMain(m *testing.M) {
	if os.Getenv(dropCapsEnv) == "1" {
		dropCapsAndExec() // returns only on failure
		os.Exit(3)
	}
	if os.Getenv(pid1Env) == "1" {
		_ = os.Unsetenv(pid1Env)
		if err := mountOwnProc(); err != nil {
			fmt.Fprintln(os.Stderr, "pid 1 helper:", err)
			os.Exit(3)
		}
	}
	if os.Getenv(daemonEnv) == "1" {
		// As main does: the daemon forks its children, and reloads, on the main thread.
		mt := daemon.NewMainThread()
		stderr := hangAt(os.Stderr)
		run := func() int {
			return runMainOn(context.Background(), mt, os.Args[1:], os.Getenv, os.Stdout, stderr)
		}
		if holdMainThread() {
			go func() { os.Exit(run()) }()
			select {} // the main thread never serves: a deadlocked main goroutine
		}
		os.Exit(mt.Serve(run))
	}
	if pid := os.Getenv(fdReaderEnv); pid != "" {
		os.Exit(fdReader(pid))
	}
	if mode := os.Getenv(hardenHelperEnv); mode != "" {
		os.Exit(hardenHelper(mode))
	}
	goleak.VerifyTestMain(m)
}
