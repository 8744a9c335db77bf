package main

import (
	"fmt"
	"os"
	"syscall"

	"github.com/molecule-ai/codex-warm/internal/childproc"
)

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER from <linux/prctl.h>.
const prSetChildSubreaper = 36

// becomeSubreaper makes the soak the parent of its orphaned descendants: the codex children of a
// SIGKILLed daemon. Without it they are re-parented to the host's init, and where that is not a
// real init (a container's pid 1 often is not) they stay behind as zombies after they exit.
func becomeSubreaper() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		return fmt.Errorf("prctl(PR_SET_CHILD_SUBREAPER): %w", errno)
	}
	return nil
}

// reapOrphans waits for the exited codex processes re-parented to the soak and returns how many
// it reaped. It touches only zombies named codex whose parent is the soak, so it never takes the
// exit status of a process os/exec is waiting for (the daemon, `supervisor status`).
func reapOrphans() int {
	self := os.Getpid()
	procs, err := childproc.ProcFS{}.All()
	if err != nil {
		return 0
	}
	n := 0
	for _, p := range procs {
		if !p.Zombie() || p.PPID != self || p.Comm != "codex" {
			continue
		}
		var ws syscall.WaitStatus
		if got, err := syscall.Wait4(p.PID, &ws, syscall.WNOHANG, nil); err == nil && got == p.PID {
			n++
		}
	}
	return n
}
