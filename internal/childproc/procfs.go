package childproc

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// DefaultMount is where the kernel's process file system is mounted.
const DefaultMount = "/proc"

// ProcFS is the project's one reader of /proc: the daemon, the boot sweep, the benchmark and the
// soak read processes through it. The zero value reads DefaultMount; tests point Mount at a tree
// of files shaped like /proc.
type ProcFS struct {
	// Mount is the mount point of the process file system; empty means DefaultMount.
	Mount string
}

// Stat is the part of /proc/<pid>/stat the project reads. CPU fields are in clock ticks.
type Stat struct {
	PID     int
	Comm    string
	State   byte
	PPID    int
	PGRP    int
	Session int
	UTime   uint64 // ticks spent in user mode
	STime   uint64 // ticks spent in kernel mode
	CUTime  uint64 // user ticks of waited-for children
	CSTime  uint64 // kernel ticks of waited-for children
	// StartTime is field 22: clock ticks after boot. With PID it identifies a process across pid
	// reuse, within one boot.
	StartTime uint64
	// RSSBytes is the resident set size (field 24, in pages) in bytes.
	RSSBytes int64
}

// CPUTicks is the process's own CPU plus that of its reaped descendants. Counting the reaped
// ones keeps a tree's total monotonic when a descendant exits between two readings: its time
// moves from its own fields into its parent's c-fields.
func (s Stat) CPUTicks() uint64 {
	return s.UTime + s.STime + s.CUTime + s.CSTime
}

// Zombie reports whether the process has exited and waits to be reaped.
func (s Stat) Zombie() bool { return s.State == 'Z' }

// Memory is a process's memory use in bytes.
type Memory struct {
	// RSS counts every resident page the process maps, shared ones in full: summed over a tree
	// it counts a shared page once per process.
	RSS int64
	// PSS divides each resident page by the number of processes mapping it: summed over a tree
	// it counts a shared page once.
	PSS int64
	// USS is the memory private to the process (Private_Clean + Private_Dirty): what its exit
	// gives back.
	USS int64
	// Anon is the resident memory that belongs to no file: heap, stacks. For a codex child, PSS
	// minus Anon is its share of the pages of the binary it maps, which the children share: the
	// part of their summed PSS that does not grow with the number of children.
	Anon int64
}

func (p ProcFS) fs() (procfs.FS, error) {
	m := p.Mount
	if m == "" {
		m = DefaultMount
	}
	fs, err := procfs.NewFS(m)
	if err != nil {
		return procfs.FS{}, fmt.Errorf("open %s: %w", m, err)
	}
	return fs, nil
}

func (p ProcFS) proc(pid int) (procfs.Proc, error) {
	if pid <= 0 {
		return procfs.Proc{}, fmt.Errorf("pid %d: %w", pid, os.ErrNotExist)
	}
	fs, err := p.fs()
	if err != nil {
		return procfs.Proc{}, err
	}
	pr, err := fs.Proc(pid)
	if err != nil {
		return procfs.Proc{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	return pr, nil
}

// Stat reads /proc/<pid>/stat. The command name may hold spaces and parentheses; the library
// counts the fields from the last ')'.
func (p ProcFS) Stat(pid int) (Stat, error) {
	pr, err := p.proc(pid)
	if err != nil {
		return Stat{}, err
	}
	return statOf(pr)
}

func statOf(pr procfs.Proc) (Stat, error) {
	s, err := pr.Stat()
	if err != nil {
		return Stat{}, fmt.Errorf("read stat of pid %d: %w", pr.PID, err)
	}
	if len(s.State) != 1 {
		return Stat{}, fmt.Errorf("read stat of pid %d: state %q is not one letter", pr.PID, s.State)
	}
	return Stat{
		PID: s.PID, Comm: s.Comm, State: s.State[0], PPID: s.PPID, PGRP: s.PGRP, Session: s.Session,
		UTime: uint64(s.UTime), STime: uint64(s.STime), CUTime: uint64(s.CUTime), CSTime: uint64(s.CSTime),
		StartTime: s.Starttime, RSSBytes: int64(s.ResidentMemory()),
	}, nil
}

// All reads the stat of every process in /proc. Processes that exit while it reads are skipped.
func (p ProcFS) All() ([]Stat, error) {
	fs, err := p.fs()
	if err != nil {
		return nil, err
	}
	procs, err := fs.AllProcs()
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	out := make([]Stat, 0, len(procs))
	for _, pr := range procs {
		if st, err := statOf(pr); err == nil {
			out = append(out, st)
		}
	}
	return out, nil
}

// RSS returns pid's resident set size in bytes, 0 when unknown (no such process, or pid <= 0).
// It is the cheap reading: one small file, no walk of the page tables.
func (p ProcFS) RSS(pid int) int64 {
	st, err := p.Stat(pid)
	if err != nil {
		return 0
	}
	return st.RSSBytes
}

// Memory reads pid's RSS from its stat and its PSS and USS from /proc/<pid>/smaps_rollup. The
// rollup walks the process's page tables, so it costs more than RSS; another user's process
// cannot be read without privileges.
func (p ProcFS) Memory(pid int) (Memory, error) {
	pr, err := p.proc(pid)
	if err != nil {
		return Memory{}, err
	}
	st, err := statOf(pr)
	if err != nil {
		return Memory{}, err
	}
	r, err := pr.ProcSMapsRollup()
	if err != nil {
		return Memory{}, fmt.Errorf("read smaps_rollup of pid %d: %w", pid, err)
	}
	return Memory{RSS: st.RSSBytes, PSS: int64(r.Pss), USS: int64(r.PrivateClean + r.PrivateDirty), Anon: int64(r.Anonymous)}, nil
}

// WriteChars reads the bytes pid has handed to write(2) and its kin so far (wchar of
// /proc/<pid>/io): files, pipes and sockets alike, whether or not they reached a disk. Benchmarks
// take differences of it.
func (p ProcFS) WriteChars(pid int) (int64, error) {
	pr, err := p.proc(pid)
	if err != nil {
		return 0, err
	}
	io, err := pr.IO()
	if err != nil {
		return 0, fmt.Errorf("read io of pid %d: %w", pid, err)
	}
	return int64(io.WChar), nil
}

// MemAvailable returns the kernel's estimate of the memory available for new work without
// swapping (MemAvailable in /proc/meminfo), in bytes.
func (p ProcFS) MemAvailable() (int64, error) {
	fs, err := p.fs()
	if err != nil {
		return 0, err
	}
	mi, err := fs.Meminfo()
	if err != nil {
		return 0, fmt.Errorf("read meminfo: %w", err)
	}
	if mi.MemAvailableBytes == nil {
		return 0, fmt.Errorf("read meminfo: no MemAvailable line (kernel older than 3.14?)")
	}
	return int64(*mi.MemAvailableBytes), nil
}

// Exe returns the path /proc/<pid>/exe points at.
func (p ProcFS) Exe(pid int) (string, error) {
	pr, err := p.proc(pid)
	if err != nil {
		return "", err
	}
	exe, err := pr.Executable()
	if err != nil {
		return "", fmt.Errorf("read exe of pid %d: %w", pid, err)
	}
	return exe, nil
}

// Environ returns pid's environment, "NAME=value" each. Another user's is not readable.
func (p ProcFS) Environ(pid int) ([]string, error) {
	pr, err := p.proc(pid)
	if err != nil {
		return nil, err
	}
	env, err := pr.Environ()
	if err != nil {
		return nil, fmt.Errorf("read environ of pid %d: %w", pid, err)
	}
	return env, nil
}

// CmdLine returns pid's arguments; empty for a zombie or a kernel thread.
func (p ProcFS) CmdLine(pid int) ([]string, error) {
	pr, err := p.proc(pid)
	if err != nil {
		return nil, err
	}
	args, err := pr.CmdLine()
	if err != nil {
		return nil, fmt.Errorf("read cmdline of pid %d: %w", pid, err)
	}
	return args, nil
}

// atClkTck is the auxiliary vector key of the kernel's clock tick rate (USER_HZ).
const atClkTck = 17

// fallbackClockTick is 100 Hz, USER_HZ on every mainstream Linux build.
const fallbackClockTick = 10 * time.Millisecond

// ClockTick returns the length of one clock tick of the CPU and start-time fields of stat
// (USER_HZ). The kernel passes USER_HZ to every process in its auxiliary vector (self/auxv),
// which saves calling sysconf through cgo; 100 Hz is the fallback when it cannot be read.
func (p ProcFS) ClockTick() time.Duration {
	m := p.Mount
	if m == "" {
		m = DefaultMount
	}
	b, err := os.ReadFile(m + "/self/auxv")
	if err != nil {
		return fallbackClockTick
	}
	if hz := parseAuxvClkTck(b); hz > 0 {
		return time.Second / time.Duration(hz)
	}
	return fallbackClockTick
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

// BootID returns the kernel's id of this boot, "" when unknown. Start times count clock ticks
// since boot, so a record of another boot identifies nothing.
func (p ProcFS) BootID() string {
	m := p.Mount
	if m == "" {
		m = DefaultMount
	}
	b, err := os.ReadFile(m + "/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// FlockHolder names the process holding a flock(2) lock on the file with device dev and inode
// ino, from the mount's locks file, leaving out the process exclude (the caller itself):
// "pid 123 (codex)", or "" when none is listed or the file cannot be read. Blocked waiters
// (lines with "->") hold nothing and are skipped.
func (p ProcFS) FlockHolder(dev, ino uint64, exclude int) string {
	m := p.Mount
	if m == "" {
		m = DefaultMount
	}
	f, err := os.Open(filepath.Join(m, "locks"))
	if err != nil {
		return ""
	}
	defer f.Close()
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(dev), unix.Minor(dev), ino)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[1] != "FLOCK" || fields[5] != want {
			continue
		}
		pid, err := strconv.Atoi(fields[4])
		if err != nil || pid == exclude {
			continue
		}
		if st, err := p.Stat(pid); err == nil {
			return fmt.Sprintf("pid %d (%s)", pid, st.Comm)
		}
		return fmt.Sprintf("pid %d", pid)
	}
	return ""
}
