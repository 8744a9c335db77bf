package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
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
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, state, ppid, ok := readStat(pid)
		if !ok || state != "Z" || ppid != self || comm != "codex" {
			continue
		}
		var ws syscall.WaitStatus
		if got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); err == nil && got == pid {
			n++
		}
	}
	return n
}

// readStat reads a process's command name, state and parent from /proc/<pid>/stat.
func readStat(pid int) (comm, state string, ppid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", "", 0, false
	}
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return "", "", 0, false
	}
	f := strings.Fields(string(b[end+1:]))
	if len(f) < 2 {
		return "", "", 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return string(b[open+1 : end]), f[0], ppid, err == nil
}
