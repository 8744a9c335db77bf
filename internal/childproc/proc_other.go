//go:build unix && !linux

package childproc

import (
	"errors"
	"syscall"
)

// SysProcAttr puts the child in its own process group, so that signals reach the tools codex
// starts too; cred, when set, runs it as another user.
func SysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred}
}

// AwaitExitNoReap is not available here. The group is then not signalled after the leader
// exited: once cmd.Wait reaped it, the group id could name someone else's processes.
func AwaitExitNoReap(pid int) error {
	return errors.New("waitid(WNOWAIT) is not supported on this platform")
}
