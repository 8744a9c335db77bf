package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is a process found in /proc.
type proc struct {
	PID  int
	PPID int
	Exe  string
	Cmd  string
}

func (p proc) String() string { return fmt.Sprintf("pid %d (ppid %d) %s", p.PID, p.PPID, p.Cmd) }

// procMatcher recognizes the soak's processes among all of the host's: other runs (tests, the
// benchmark) use the same codex binary at the same time, so the binary alone is not enough.
type procMatcher struct {
	// envMarker is "CODEX_HOME=<the soak's codex home>": the daemon passes its environment to
	// every codex child, and codex to its tools, so it marks the whole tree even after the
	// daemon died and the children were re-parented.
	envMarker []byte
	codexBin  string // resolved path of the codex binary
	self      int    // the soak's pid: codex children below it are ours whatever their env
	skip      map[int]bool
}

// scan lists the soak's processes other than those in m.skip.
func (m procMatcher) scan() ([]proc, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("scan /proc: %w", err)
	}
	parents := make(map[int]int)
	var cands []proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == m.self || m.skip[pid] {
			continue
		}
		p, ok := readProc(pid)
		if !ok {
			continue
		}
		parents[pid] = p.PPID
		cands = append(cands, p)
	}
	var out []proc
	for _, p := range cands {
		if m.hasMarker(p.PID) || (p.Exe == m.codexBin && descends(p.PID, m.self, parents)) {
			out = append(out, p)
		}
	}
	return out, nil
}

func (m procMatcher) hasMarker(pid int) bool {
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	for kv := range bytes.SplitSeq(env, []byte{0}) {
		if bytes.Equal(kv, m.envMarker) {
			return true
		}
	}
	return false
}

// isOurCodex says whether pid is, right now, a codex process of this soak: checked just before
// it is sent a signal, so that a recycled pid is never killed.
func (m procMatcher) isOurCodex(pid int) bool {
	p, ok := readProc(pid)
	return ok && p.Exe == m.codexBin && m.hasMarker(pid)
}

func descends(pid, ancestor int, parents map[int]int) bool {
	for range 64 {
		pp, ok := parents[pid]
		if !ok || pp <= 1 {
			return false
		}
		if pp == ancestor {
			return true
		}
		pid = pp
	}
	return false
}

// readProc reads a process's parent, executable and command line; ok is false when it is gone
// or not readable (another user's).
func readProc(pid int) (proc, bool) {
	dir := "/proc/" + strconv.Itoa(pid)
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return proc{}, false
	}
	// The command name in parentheses may contain spaces; fields after the last ')' are fixed.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return proc{}, false
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 2 {
		return proc{}, false
	}
	if f[0] == "Z" {
		// A zombie waits for its parent to reap it; it holds no memory and cannot be killed.
		return proc{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	exe, _ := os.Readlink(dir + "/exe")
	cmd, _ := os.ReadFile(dir + "/cmdline")
	return proc{PID: pid, PPID: ppid, Exe: exe, Cmd: strings.TrimSpace(string(bytes.ReplaceAll(cmd, []byte{0}, []byte{' '})))}, true
}

// resolveExe is the path /proc/<pid>/exe shows for bin.
func resolveExe(bin string) (string, error) {
	abs, err := filepath.Abs(bin)
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", bin, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", bin, err)
	}
	return real, nil
}

// sweep SIGKILLs the soak's leftover processes (each with its process group: codex children
// lead their own group, and their tools are in it) and waits until they are gone or ctx ends.
// It returns what it found.
func (m procMatcher) sweep(ctx context.Context) ([]proc, error) {
	found, err := m.scan()
	if err != nil || len(found) == 0 {
		return found, err
	}
	for _, p := range found {
		if pgid, err := syscall.Getpgid(p.PID); err == nil && pgid == p.PID {
			_ = syscall.Kill(-p.PID, syscall.SIGKILL)
		}
		_ = syscall.Kill(p.PID, syscall.SIGKILL)
	}
	err = pollUntil(ctx, 50*time.Millisecond, func(context.Context) (bool, error) {
		left, err := m.scan()
		return err == nil && len(left) == 0, nil
	})
	if err != nil {
		return found, fmt.Errorf("leftover processes did not go away: %w", err)
	}
	return found, nil
}
