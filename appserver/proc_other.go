//go:build unix && !linux

package appserver

import (
	"errors"
	"syscall"
)

// sysProcAttr puts the child in its own process group, so that signals reach the tools codex
// starts too.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// awaitExitNoReap is not available here. The group is then not signalled after the leader
// exited: once cmd.Wait reaped it, the group id could name someone else's processes.
func awaitExitNoReap(pid int) error {
	return errors.New("waitid(WNOWAIT) is not supported on this platform")
}
