//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// fdReaderEnv selects the test binary's /proc reader mode: it polls /proc/<pid>/fd of the pid
// in the variable, as a process of the daemon's user without privileges, and tries to read
// every handoff memfd it sees, until its stdin closes; it then prints an fdReading.
const fdReaderEnv = "CODEX_WARM_TEST_FD_READER"

// fdReading is what the reader saw: handoff descriptors listed, and read with some content.
type fdReading struct {
	// Dirs counts the listings of /proc/<pid>/fd that succeeded (the image was dumpable).
	Dirs, Listed, Read int
	Sample             string
}

// fdReader is the reader mode. It gives up its effective capabilities on the thread it reads
// from (the test runs as root, whose capabilities would open anything): it is then what a
// command codex runs for the model is to the daemon (which the test starts without
// capabilities), a process of the same uid.
func fdReader(pid string) int {
	runtime.LockOSThread()
	// Without effective capabilities, the kernel's checks are an ordinary user's: the ptrace
	// check of /proc/<pid>/fd passes a dumpable process of the same uid, and the file's mode
	// is checked without CAP_DAC_OVERRIDE.
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		fmt.Fprintf(os.Stderr, "capget: %v\n", err)
		return 1
	}
	data[0].Effective, data[1].Effective = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		fmt.Fprintf(os.Stderr, "capset: %v\n", err)
		return 1
	}
	stop := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stop)
	}()
	var r fdReading
	dir := "/proc/" + pid + "/fd"
	for {
		select {
		case <-stop:
			b, _ := json.Marshal(r)
			fmt.Printf("%s\n", b)
			return 0
		default:
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		r.Dirs++
		for _, e := range ents {
			link, err := os.Readlink(dir + "/" + e.Name())
			if err != nil || !strings.Contains(link, "codex-warm-handoff") {
				continue
			}
			r.Listed++
			if b, err := os.ReadFile(dir + "/" + e.Name()); err == nil && len(b) > 0 {
				r.Read++
				r.Sample = capString(string(b), 80)
			}
		}
	}
}

// startFDReader starts the reader on pid; the returned function stops it and returns what it saw.
func startFDReader(t *testing.T, pid int) func() fdReading {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = []string{fdReaderEnv + "=" + strconv.Itoa(pid)}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return func() fdReading {
		_ = stdin.Close()
		line, rerr := bufio.NewReader(out).ReadString('\n')
		if err := cmd.Wait(); err != nil {
			t.Fatalf("fd reader: %v", err)
		}
		var r fdReading
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("fd reader said %q (%v): %v", line, rerr, err)
		}
		return r
	}
}

// dropCapsEnv makes the test binary, started as a daemon by root, give up every capability
// before it runs: it then is what a daemon of an ordinary user is to a process of its uid
// (root's capabilities would pass every check the test looks at).
const dropCapsEnv = "CODEX_WARM_TEST_DROP_CAPS"

// dropCapsAndExec empties the capability bounding set of this thread and re-executes the
// binary from it: an execve by root then grants no capability. It returns only on failure.
func dropCapsAndExec() {
	runtime.LockOSThread()
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			fmt.Fprintf(os.Stderr, "drop capability %d: %v\n", c, err)
			return
		}
	}
	_ = os.Unsetenv(dropCapsEnv)
	err := syscall.Exec(os.Args[0], os.Args, os.Environ())
	fmt.Fprintf(os.Stderr, "exec: %v\n", err)
}

// socketInodes returns the inodes of the sockets pid holds open.
func socketInodes(t *testing.T, pid int) map[string]bool {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range ents {
		if link, err := os.Readlink(dir + "/" + e.Name()); err == nil && strings.HasPrefix(link, "socket:") {
			out[link] = true
		}
	}
	return out
}

// A process of the daemon's user, without privileges, polls /proc/<pid>/fd through five
// reloads and tries to read the handoff (which carries the secret variables): it reads nothing.
// Then the codex children started after the reloads (a new chat's child, the spare) hold none
// of the daemon's sockets: the listeners and the control socket handed over were close-on-exec
// again before the new image's first fork.
func TestE2EReloadNothingReadable(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true, Env: []string{dropCapsEnv + "=1"}})
	installReloadable(t, e)
	d := e.start("--spares", "1")
	c := newLocalClient(t, d)
	if r := c.send("warm", "first message"); r.Status != "completed" {
		t.Fatalf("first reply: %+v", r)
	}
	stop := startFDReader(t, d.pid)
	for round := 1; round <= 5; round++ {
		installBin(t, e.bin)
		if code, out := e.reloadCmd(); code != 0 {
			t.Fatalf("reload %d: exit %d: %s", round, code, out)
		}
	}
	if r := stop(); r.Read > 0 {
		t.Errorf("a same-user process without privileges read the handoff %d times (listed it %d times): %q", r.Read, r.Listed, r.Sample)
	} else {
		t.Logf("the reader listed the daemon's descriptors %d times, the handoff %d times, read it 0 times", r.Dirs, r.Listed)
	}

	if r := c.send("fresh", "a chat started after the reloads"); r.Status != "completed" {
		t.Fatalf("new chat: %+v", r)
	}
	d.waitUntil("a spare", func() bool { return len(spares(d.status())) > 0 })
	daemonSockets := socketInodes(t, d.pid)
	doc := d.status()
	var kids []int
	for _, ch := range doc.Snapshot.Children {
		if ch.ChatKey != "warm" {
			kids = append(kids, ch.PID)
		}
	}
	if len(kids) < 2 {
		t.Fatalf("want the new chat's child and a spare, got %+v", doc.Snapshot.Children)
	}
	for _, pid := range kids {
		for s := range socketInodes(t, pid) {
			if daemonSockets[s] {
				t.Errorf("codex child %d holds the daemon's %s", pid, s)
			}
		}
	}
	d.stop(stopTimeout)
}
