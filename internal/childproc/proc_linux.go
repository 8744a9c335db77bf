package childproc

import (
	"errors"
	"syscall"
	"unsafe"
)

// SysProcAttr makes the child the leader of its own session (and so of its own process group),
// so that signals to the group reach the tools codex starts too, and asks the kernel to SIGKILL
// it should the daemon die without closing it. The session matters when the daemon dies: the
// child's tools and MCP servers (codex starts those in process groups of their own) do not get
// the parent-death signal, and the next daemon's boot sweep finds them by the child's session
// id, which the kernel keeps reserved while any of them runs.
// Pdeathsig is tied to the OS thread that started the child; the Go runtime only retires a
// thread when a goroutine locked to it exits without unlocking, which the project never does.
// cred, when set, runs the child as another user; Go applies Pdeathsig after the user change,
// which would otherwise clear it.
func SysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
}

// AwaitExitNoReap blocks until process pid has exited but leaves it a zombie (waitid with
// WNOWAIT). While the zombie exists its pid, and so its process group id, cannot be reused, which
// makes it safe to signal the group before cmd.Wait reaps the leader.
func AwaitExitNoReap(pid int) error {
	const pPID = 1     // idtype_t P_PID
	var info [128]byte // siginfo_t
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&info[0])), syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		switch {
		case errno == 0:
			return nil
		case errors.Is(errno, syscall.EINTR):
			continue
		default:
			return errno
		}
	}
}
