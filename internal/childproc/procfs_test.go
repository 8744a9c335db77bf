package childproc

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeProc writes a tree shaped like /proc holding one process, pid, with the given files, and
// returns a reader of it.
func fakeProc(t *testing.T, pid int, files map[string]string) ProcFS {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return ProcFS{Mount: root}
}

// statTail pads a stat line that ends at field 24 (rss) with the fields a kernel writes after
// it, as zeros.
func statTail(head string) string {
	return head + strings.Repeat(" 0", 52-24) + "\n"
}

func TestStatCommWithParentheses(t *testing.T) {
	// comm with spaces and a ')' inside: only the last ')' ends it.
	p := fakeProc(t, 4242, map[string]string{"stat": statTail(
		"4242 (codex (main) x) S 17 4242 4240 0 -1 4194560 100 0 0 0 250 31 7 3 20 0 12 0 987654 1000 200")})
	st, err := p.Stat(4242)
	if err != nil {
		t.Fatal(err)
	}
	want := Stat{PID: 4242, Comm: "codex (main) x", State: 'S', PPID: 17, PGRP: 4242, Session: 4240,
		UTime: 250, STime: 31, CUTime: 7, CSTime: 3, StartTime: 987654, RSSBytes: 200 * int64(os.Getpagesize())}
	if st != want {
		t.Errorf("Stat =\n%+v, want\n%+v", st, want)
	}
	if got := st.CPUTicks(); got != 291 {
		t.Errorf("CPUTicks = %d, want 291", got)
	}
	if got := p.RSS(4242); got != want.RSSBytes {
		t.Errorf("RSS = %d, want %d", got, want.RSSBytes)
	}

	p = fakeProc(t, 4242, map[string]string{"stat": statTail(
		"4242 (co) dex (x)) Z 1 4242 4240 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 3 0 987654 1000 10")})
	if st, err := p.Stat(4242); err != nil || st.State != 'Z' || !st.Zombie() || st.PGRP != 4242 || st.Session != 4240 || st.StartTime != 987654 {
		t.Fatalf("Stat: %+v %v", st, err)
	}
}

func TestStatMalformed(t *testing.T) {
	for _, bad := range []string{"", "12 codex S 1", "12 (x) S 1", "12 (x) S 1 2 3",
		"12 (x) S a 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21"} {
		p := fakeProc(t, 12, map[string]string{"stat": bad})
		if st, err := p.Stat(12); err == nil {
			t.Errorf("Stat of %q = %+v, want an error", bad, st)
		}
	}
	if _, err := (ProcFS{Mount: t.TempDir()}).Stat(12); err == nil {
		t.Error("Stat of a missing pid succeeded")
	}
}

func TestStatSelf(t *testing.T) {
	var p ProcFS
	st, err := p.Stat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st.PID != os.Getpid() || st.PPID != os.Getppid() || st.StartTime == 0 {
		t.Errorf("self stat pid/ppid = %d/%d start %d, want %d/%d", st.PID, st.PPID, st.StartTime, os.Getpid(), os.Getppid())
	}
	all, err := p.All()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range all {
		found = found || s.PID == os.Getpid()
	}
	if !found {
		t.Errorf("All (%d processes) misses the test's own pid %d", len(all), os.Getpid())
	}
}

func TestRSS(t *testing.T) {
	var p ProcFS
	if rss := p.RSS(os.Getpid()); rss < 1<<20 {
		t.Errorf("RSS(self) = %d, want at least 1 MiB for a running Go test binary", rss)
	}
	for _, pid := range []int{0, -1, 1 << 30} {
		if rss := p.RSS(pid); rss != 0 {
			t.Errorf("RSS(%d) = %d, want 0 for no such process", pid, rss)
		}
	}
}

func TestMemoryFromRollup(t *testing.T) {
	rollup := "00400000-7ffd0000 ---p 00000000 00:00 0                          [rollup]\n" +
		"Rss:               10240 kB\nPss:                6144 kB\nPss_Anon:           1000 kB\n" +
		"Shared_Clean:       4096 kB\nShared_Dirty:          0 kB\nPrivate_Clean:      1024 kB\n" +
		"Private_Dirty:      3072 kB\nReferenced:        10240 kB\nAnonymous:          3072 kB\n" +
		"Swap:                  0 kB\nSwapPss:               0 kB\n"
	p := fakeProc(t, 77, map[string]string{
		"stat":         statTail("77 (codex) S 1 77 77 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 1000 2560"),
		"smaps_rollup": rollup,
	})
	m, err := p.Memory(77)
	if err != nil {
		t.Fatal(err)
	}
	want := Memory{RSS: 2560 * int64(os.Getpagesize()), PSS: 6144 << 10, USS: (1024 + 3072) << 10, Anon: 3072 << 10}
	if m != want {
		t.Errorf("Memory = %+v, want %+v", m, want)
	}
}

func TestMemorySelf(t *testing.T) {
	m, err := ProcFS{}.Memory(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Private pages count in full in PSS, so PSS is never below USS.
	if m.RSS < 1<<20 || m.PSS <= 0 || m.USS <= 0 || m.USS > m.PSS {
		t.Errorf("Memory(self) = %+v, want RSS >= 1 MiB and 0 < USS <= PSS", m)
	}
}

func TestIdentitySelf(t *testing.T) {
	id := ReadIdentity(os.Getpid())
	exe, _ := os.Executable()
	resolved, _ := filepath.EvalSymlinks(exe)
	// The group and session are compared with the kernel's answer, not with zero: a test run
	// whose session leader lives outside its pid namespace (a CI runner) has session 0.
	pgid, _ := unix.Getpgid(0)
	sid, _ := unix.Getsid(0)
	if id.PID != os.Getpid() || id.StartTime == 0 || id.Exe != resolved || id.PGID != pgid || id.SID != sid {
		t.Errorf("ReadIdentity(self) = %+v, want start time, exe %s, group %d and session %d", id, resolved, pgid, sid)
	}
	if id := ReadIdentity(1 << 30); id.StartTime != 0 {
		t.Errorf("ReadIdentity of no process = %+v, want no start time", id)
	}
	if (ProcFS{}).BootID() == "" {
		t.Error("no boot id")
	}
}

func TestMemAvailable(t *testing.T) {
	root := t.TempDir()
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(root, "meminfo"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := ProcFS{Mount: root}
	write("MemTotal:       32768000 kB\nMemFree:         1000000 kB\nMemAvailable:    3072000 kB\n")
	if got, err := p.MemAvailable(); err != nil || got != 3072000<<10 {
		t.Fatalf("MemAvailable = %d, %v; want %d", got, err, 3072000<<10)
	}
	write("MemTotal:       32768000 kB\nMemFree:         1000000 kB\n")
	if got, err := p.MemAvailable(); err == nil {
		t.Fatalf("MemAvailable without the line = %d, want an error", got)
	}
	if got, err := (ProcFS{}).MemAvailable(); err != nil || got <= 0 {
		t.Fatalf("MemAvailable of this machine = %d, %v", got, err)
	}
}

func TestParseAuxvClkTck(t *testing.T) {
	aux := func(pairs ...uint64) []byte {
		b := make([]byte, 8*len(pairs))
		for i, v := range pairs {
			binary.NativeEndian.PutUint64(b[8*i:], v)
		}
		return b
	}
	if got := parseAuxvClkTck(aux(6, 4096, 17, 250, 0, 0)); got != 250 {
		t.Errorf("AT_CLKTCK = %d, want 250", got)
	}
	// An AT_NULL ends the vector; anything after it is not read.
	if got := parseAuxvClkTck(aux(6, 4096, 0, 0, 17, 250)); got != 0 {
		t.Errorf("AT_CLKTCK after AT_NULL = %d, want 0", got)
	}
	if got := parseAuxvClkTck([]byte{1, 2, 3}); got != 0 {
		t.Errorf("short auxv = %d", got)
	}
}

// ClockTick reads USER_HZ from self/auxv under the mount, and falls back to 100 Hz without it.
func TestClockTick(t *testing.T) {
	if tick := (ProcFS{}).ClockTick(); tick <= 0 || tick > time.Second {
		t.Errorf("ClockTick = %s", tick)
	}
	root := t.TempDir()
	if got := (ProcFS{Mount: root}).ClockTick(); got != fallbackClockTick {
		t.Errorf("ClockTick without auxv = %s, want %s", got, fallbackClockTick)
	}
	b := make([]byte, 32)
	binary.NativeEndian.PutUint64(b[0:], atClkTck)
	binary.NativeEndian.PutUint64(b[8:], 250)
	if err := os.MkdirAll(filepath.Join(root, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "self", "auxv"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := (ProcFS{Mount: root}).ClockTick(); got != 4*time.Millisecond {
		t.Errorf("ClockTick with USER_HZ 250 = %s, want 4ms", got)
	}
}

// FlockHolder names the process holding a flock on a file from the real /proc/locks: another
// process (flock(1)) holding it is named by pid and command; a file nobody locks, and the
// caller's own lock, name nobody.
func TestFlockHolder(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "auth.lock")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	p := ProcFS{}
	if got := p.FlockHolder(st.Dev, st.Ino, os.Getpid()); got != "" {
		t.Fatalf("nobody holds it, got %q", got)
	}
	holder := exec.Command("flock", "-x", path, "-c", "echo locked; read x || true")
	holder.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, _ := holder.StdinPipe()
	out, _ := holder.StdoutPipe()
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = holder.Wait() }()
	buf := make([]byte, 7)
	if _, err := io.ReadFull(out, buf); err != nil || string(buf) != "locked\n" {
		t.Fatalf("lock holder: %q %v", buf, err)
	}
	if got, want := p.FlockHolder(st.Dev, st.Ino, os.Getpid()), fmt.Sprintf("pid %d (flock)", holder.Process.Pid); got != want {
		t.Errorf("FlockHolder = %q, want %q", got, want)
	}
	if got := p.FlockHolder(st.Dev, st.Ino, holder.Process.Pid); got != "" {
		t.Errorf("the excluded process was named: %q", got)
	}
}
