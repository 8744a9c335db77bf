package daemon

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/molecule-ai/codex-warm/internal/daemon/handoff"
)

// initChildEnv marks the daemon a daemon started as PID 1 runs as its only child.
const initChildEnv = "CODEX_WARM_INIT_CHILD"

// asInit reports whether `supervisor run` is to act as the init of its PID namespace: PID 1 (a
// container run without an init), not the child it started, and not an image a reload started
// (a daemon that was PID 1 before this code keeps the role it had).
func asInit(getenv func(string) string) bool {
	return os.Getpid() == 1 && getenv(initChildEnv) == "" && getenv(handoff.EnvFD) == ""
}

// runInit is what the daemon does as PID 1: it runs itself, with the same arguments, as its
// child and is that child's init, as tini or `docker run --init` is. The kernel drops a signal
// whose action is the default when it is sent to PID 1, which a reload's exec window has, and
// orphans (a process a codex tool command left behind) are re-parented to PID 1, which must wait
// for them or they stay zombies. So the init forwards SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1
// and SIGUSR2 to the daemon, reaps every process that ends under it, and exits as the daemon
// did (128 + the signal when a signal ended it). Only the init's own child is the daemon, so
// reaping everything never takes a status os/exec waits for.
func runInit(mt *MainThread, stderr io.Writer) int {
	sigs := make(chan os.Signal, 32)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1,
		syscall.SIGUSR2, syscall.SIGCHLD)
	defer signal.Stop(sigs)
	var p *os.Process
	var err error
	attr := &os.ProcAttr{Env: append(os.Environ(), initChildEnv+"=1"), Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		// The init ends only after the daemon; were it killed, the daemon ends too.
		Sys: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}}
	mt.do(func() { p, err = os.StartProcess("/proc/self/exe", os.Args, attr) })
	if err != nil {
		fmt.Fprintf(stderr, "supervisor run: as PID 1, cannot start the daemon under it: %v\n", err)
		return 1
	}
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			_ = p.Signal(sig)
			continue
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if err != nil || pid <= 0 {
				break
			}
			if pid != p.Pid {
				continue // an orphan
			}
			if ws.Signaled() {
				return 128 + int(ws.Signal())
			}
			return ws.ExitStatus()
		}
	}
	return 1
}
