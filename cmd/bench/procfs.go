package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// procStat is the part of /proc/<pid>/stat the bench reads. CPU fields are in clock ticks.
type procStat struct {
	PID       int
	Comm      string
	State     byte
	PPID      int
	PGRP      int
	UTime     uint64 // ticks spent in user mode
	STime     uint64 // ticks spent in kernel mode
	CUTime    uint64 // user ticks of waited-for children
	CSTime    uint64 // kernel ticks of waited-for children
	StartTime uint64 // ticks after boot; with PID it identifies a process across pid reuse
}

// cpuTicks is the process's own CPU plus that of its reaped descendants. Counting the reaped
// ones keeps a tree's total monotonic when a descendant exits between two readings: its time
// moves from its own fields into its parent's c-fields.
func (s procStat) cpuTicks() uint64 {
	return s.UTime + s.STime + s.CUTime + s.CSTime
}

// parseProcStat parses one /proc/<pid>/stat line. comm may contain spaces and parentheses, so
// the fields after it are found from the last ')'.
func parseProcStat(b []byte) (procStat, error) {
	open := bytes.IndexByte(b, '(')
	closing := bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open {
		return procStat{}, fmt.Errorf("parse proc stat %q: no (comm)", truncate(string(b), 80))
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return procStat{}, fmt.Errorf("parse proc stat pid: %w", err)
	}
	f := bytes.Fields(b[closing+1:])
	// f[0] is field 3 (state); starttime is field 22, so f needs at least 20 entries.
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("parse proc stat of pid %d: %d fields after comm", pid, len(f))
	}
	nums := make([]uint64, 0, 7)
	for _, i := range []int{1, 2, 11, 12, 13, 14, 19} {
		n, err := strconv.ParseUint(string(f[i]), 10, 64)
		if err != nil {
			return procStat{}, fmt.Errorf("parse proc stat of pid %d field %d: %w", pid, i+3, err)
		}
		nums = append(nums, n)
	}
	return procStat{
		PID:       pid,
		Comm:      string(b[open+1 : closing]),
		State:     f[0][0],
		PPID:      int(nums[0]),
		PGRP:      int(nums[1]),
		UTime:     nums[2],
		STime:     nums[3],
		CUTime:    nums[4],
		CSTime:    nums[5],
		StartTime: nums[6],
	}, nil
}

// readProcStat reads /proc/<pid>/stat.
func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, fmt.Errorf("read stat of pid %d: %w", pid, err)
	}
	return parseProcStat(b)
}

// parseVmRSS returns the VmRSS line of /proc/<pid>/status in bytes. A zombie or kernel thread has
// no VmRSS line; that is an error.
func parseVmRSS(status []byte) (int64, error) {
	for line := range bytes.Lines(status) {
		rest, ok := bytes.CutPrefix(line, []byte("VmRSS:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) != 2 || string(f[1]) != "kB" {
			return 0, fmt.Errorf("parse VmRSS %q", bytes.TrimSpace(line))
		}
		kb, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse VmRSS: %w", err)
		}
		return kb << 10, nil
	}
	return 0, errors.New("no VmRSS line")
}

// readRSS returns pid's resident set size in bytes.
func readRSS(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("read status of pid %d: %w", pid, err)
	}
	rss, err := parseVmRSS(b)
	if err != nil {
		return 0, fmt.Errorf("pid %d: %w", pid, err)
	}
	return rss, nil
}

// allProcs reads the stat of every process visible in /proc. Processes that exit while it reads
// are skipped.
func allProcs() ([]procStat, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list /proc: %w", err)
	}
	out := make([]procStat, 0, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !e.IsDir() {
			continue
		}
		st, err := readProcStat(pid)
		if err != nil {
			continue // gone meanwhile
		}
		out = append(out, st)
	}
	return out, nil
}

// descendants returns root and every process below it in the ppid tree of procs, root first.
// A root missing from procs yields nil.
func descendants(procs []procStat, root int) []procStat {
	children := make(map[int][]procStat)
	var rootStat *procStat
	for i := range procs {
		p := procs[i]
		if p.PID == root {
			rootStat = &procs[i]
		}
		children[p.PPID] = append(children[p.PPID], p)
	}
	if rootStat == nil {
		return nil
	}
	out := []procStat{*rootStat}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i].PID]...)
	}
	return out
}

// treeCPU is the CPU time used so far by root and all its descendants (live ones, and through
// the c-fields the reaped ones).
func treeCPU(root int, tick time.Duration) (time.Duration, error) {
	procs, err := allProcs()
	if err != nil {
		return 0, err
	}
	tree := descendants(procs, root)
	if len(tree) == 0 {
		return 0, fmt.Errorf("cpu of process tree: pid %d not found", root)
	}
	var ticks uint64
	for _, p := range tree {
		ticks += p.cpuTicks()
	}
	return time.Duration(ticks) * tick, nil
}

// treeRSS is the summed resident set size of root and all its live descendants. Shared pages
// count once per process, as ps would show them.
func treeRSS(root int) (total int64, n int, err error) {
	procs, err := allProcs()
	if err != nil {
		return 0, 0, err
	}
	tree := descendants(procs, root)
	if len(tree) == 0 {
		return 0, 0, fmt.Errorf("rss of process tree: pid %d not found", root)
	}
	for _, p := range tree {
		rss, err := readRSS(p.PID)
		if err != nil {
			continue // exited or a zombie: holds no memory
		}
		total += rss
		n++
	}
	return total, n, nil
}

// atClkTck is the auxiliary vector key of the kernel's clock tick rate (USER_HZ).
const atClkTck = 17

// clockTick returns the length of one /proc clock tick. The kernel passes USER_HZ to every
// process in its auxiliary vector, which saves calling sysconf through cgo; 100 Hz, the value on
// every mainstream Linux build, is the fallback.
func clockTick() time.Duration {
	b, err := os.ReadFile("/proc/self/auxv")
	if err != nil {
		return 10 * time.Millisecond
	}
	if hz := parseAuxvClkTck(b); hz > 0 {
		return time.Second / time.Duration(hz)
	}
	return 10 * time.Millisecond
}

// parseAuxvClkTck finds AT_CLKTCK in a 64-bit auxiliary vector (native byte order); 0 when absent.
func parseAuxvClkTck(b []byte) uint64 {
	for i := 0; i+16 <= len(b); i += 16 {
		key := binary.NativeEndian.Uint64(b[i:])
		val := binary.NativeEndian.Uint64(b[i+8:])
		if key == 0 {
			return 0
		}
		if key == atClkTck {
			return val
		}
	}
	return 0
}

// procEnvHas reports whether pid's environment holds a variable whose "NAME=value" text starts
// with prefix. Unreadable environments (other users, exited processes) report false.
func procEnvHas(pid int, prefix string) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
	if err != nil {
		return false
	}
	for kv := range bytes.SplitSeq(b, []byte{0}) {
		if bytes.HasPrefix(kv, []byte(prefix)) {
			return true
		}
	}
	return false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
