//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/molecule-ai/codex-warm/internal/exectest"
)

// pid1Env makes TestMain, in a process started as PID 1 of new PID and mount namespaces, mount
// that namespace's /proc before it runs as the daemon: the daemon's /proc reads then mean its
// own processes, as in a container.
const pid1Env = "CODEX_WARM_E2E_PID1"

// mountOwnProc mounts a /proc of the process's PID namespace over the inherited one, in its own
// mount namespace.
func mountOwnProc() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make the mounts private: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	return nil
}

// asPID1 makes e's daemons PID 1 of a new PID namespace, with a user namespace mapping the test's
// user to root in it (so that it works for root and for any user), as in a container without an
// init.
func asPID1(e *e2e) {
	e.extraEnv = append(e.extraEnv[:len(e.extraEnv):len(e.extraEnv)], pid1Env+"=1")
	e.procAttr = func(a *syscall.SysProcAttr) {
		a.Cloneflags = syscall.CLONE_NEWPID | syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
		a.GidMappingsEnableSetgroups = false
	}
}

// hostChildren lists the children (host pids) of host pid, over all its threads, and the state
// of each.
func hostChildren(pid int) map[int]byte {
	out := map[int]byte{}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, w := range strings.Fields(string(b)) {
			c, err := strconv.Atoi(w)
			if err != nil {
				continue
			}
			if _, state, err := procStat(c); err == nil {
				out[c] = state
			}
		}
	}
	return out
}

// zombiesUnder counts the zombies among the children of host pid and of its children.
func zombiesUnder(pid int) int {
	n := 0
	for c, state := range hostChildren(pid) {
		if state == 'Z' {
			n++
			continue
		}
		for _, s := range hostChildren(c) {
			if s == 'Z' {
				n++
			}
		}
	}
	return n
}

// The daemon as PID 1 of a PID namespace (a container run without an init), with real codex
// started behind a script that leaves an orphan each time (a process whose parent exited, as a
// codex tool command that backgrounds one does): the orphans, re-parented to PID 1, are reaped
// (no zombie stays); a burst of SIGHUPs does not kill it; a reload keeps the chat's child; and a
// SIGTERM after it drains, exit status 0.
func TestE2EDaemonAsPID1(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true})
	asPID1(e)
	installReloadable(t, e)
	wrapper := filepath.Join(e.root, "codex-orphans")
	script := "#!/bin/sh\n(sh -c 'exit 0' &)\nexec " + e.codexBin + " \"$@\"\n"
	if err := exectest.WriteExecutable(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	e.codexBin = wrapper
	d := e.launch()
	d.waitUntil("the daemon to answer in its namespace", func() bool {
		doc, err := fetchStatusQuick(d)
		d.nsPID = doc.Daemon.PID
		return err == nil && doc.Daemon.Listen != ""
	})
	d.ready = d.status()
	t.Logf("the daemon is pid %d in its namespace, %d outside", d.nsPID, d.pid)
	c := newLocalClient(t, d)
	if r := c.send("warm", "first message"); r.Status != "completed" {
		t.Fatalf("first reply: %+v", r)
	}
	key := chatChildren(d.status())[0].ChatKey
	child := childPID(d.status(), key)
	d.waitUntil("the orphans reaped", func() bool { return zombiesUnder(d.pid) == 0 })

	for range 10 {
		if err := syscall.Kill(d.pid, syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	d.waitUntil("the reloads the burst asked for to end", func() bool {
		doc, err := fetchStatusQuick(d)
		return err == nil && doc.Daemon.Reloads >= 1 && doc.Daemon.LastReload != nil && doc.Daemon.LastReload.Outcome != reloadRunning && doc.Daemon.LastReload.Outcome != reloadStarting
	})
	installBin(t, e.bin)
	// The init forwards the burst as it reads it: a SIGHUP it forwards after the new image took
	// over starts one more reload, which refuses this one while it runs. Each such refusal waits
	// for that reload to end; there are at most as many as the burst's signals.
	for try := 0; ; try++ {
		code, out := e.reloadWait("90s")
		if code == 0 {
			break
		}
		if !strings.Contains(out, "already in progress") || try == 10 {
			t.Fatalf("reload as PID 1: exit %d: %s\n%s", code, out, d.logTail(3000))
		}
		d.waitUntil("a late reload of the burst to end", func() bool {
			doc, err := fetchStatusQuick(d)
			return err == nil && doc.Daemon.LastReload != nil && doc.Daemon.LastReload.Outcome != reloadRunning && doc.Daemon.LastReload.Outcome != reloadStarting
		})
	}
	if got := childPID(d.status(), key); got != child {
		t.Fatalf("the chat's child is %d after the reloads, want %d", got, child)
	}
	if r := c.send("warm", "after the reloads"); r.Status != "completed" {
		t.Fatalf("after the reloads: %+v", r)
	}
	d.waitUntil("the orphans reaped after the reloads", func() bool { return zombiesUnder(d.pid) == 0 })
	d.signal(syscall.SIGTERM)
	d.waitExit(stopTimeout)
}
