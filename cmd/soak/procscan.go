package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/molecule-ai/codex-warm/internal/childproc"
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
	var pfs childproc.ProcFS
	all, err := pfs.All()
	if err != nil {
		return nil, fmt.Errorf("scan processes: %w", err)
	}
	parents := make(map[int]int)
	var cands []proc
	for _, st := range all {
		if st.PID == m.self || m.skip[st.PID] {
			continue
		}
		p, ok := procOf(pfs, st)
		if !ok {
			continue
		}
		parents[p.PID] = p.PPID
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
	env, err := childproc.ProcFS{}.Environ(pid)
	return err == nil && slices.Contains(env, string(m.envMarker))
}

// isOurCodex says whether pid is, right now, a codex process of this soak: checked just before
// it is sent a signal, so that a recycled pid is never killed.
func (m procMatcher) isOurCodex(pid int) bool {
	var pfs childproc.ProcFS
	st, err := pfs.Stat(pid)
	if err != nil {
		return false
	}
	p, ok := procOf(pfs, st)
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

// procOf completes a process's stat with its executable and command line; ok is false for a
// zombie, which waits for its parent to reap it: it holds no memory and cannot be killed.
func procOf(pfs childproc.ProcFS, st childproc.Stat) (proc, bool) {
	if st.Zombie() {
		return proc{}, false
	}
	exe, _ := pfs.Exe(st.PID)
	args, _ := pfs.CmdLine(st.PID)
	return proc{PID: st.PID, PPID: st.PPID, Exe: exe, Cmd: strings.Join(args, " ")}, true
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
