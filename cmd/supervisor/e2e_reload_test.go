//go:build linux

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"

	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/molecule-ai/codex-warm/internal/daemon/handoff"
	"github.com/molecule-ai/codex-warm/internal/exectest"
)

// installReloadable makes e's daemons run a copy of the test binary in e's root, which a
// reload test can replace on disk, and returns the copy's inode.
func installReloadable(t *testing.T, e *e2e) uint64 {
	t.Helper()
	e.bin = filepath.Join(e.root, "supervisor")
	return installBin(t, e.bin)
}

// wantThreadsOpenedOnce fails t unless each chat of pids opened its thread once in d's log:
// no resume, no second child, across the reloads.
func wantThreadsOpenedOnce(t *testing.T, d *daemonProc, pids map[string]int) {
	t.Helper()
	for key := range pids {
		if n := countLogs(d, "codex child ready", key); n != 1 {
			t.Errorf("chat %s: its thread was opened %d times, want once", key, n)
		}
	}
}

// installBin copies this test binary (the daemon's code) to path the way an installer does: a
// new file renamed over the old one, so that the running daemon's file is another inode. It
// returns the new file's inode.
func installBin(t *testing.T, path string) uint64 {
	t.Helper()
	src, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	return installData(t, path, src)
}

// installData installs data at path as installBin does.
func installData(t *testing.T, path string, data []byte) uint64 {
	t.Helper()
	tmp := path + ".new"
	if err := exectest.WriteExecutable(tmp, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	return inodeOf(t, path)
}

func inodeOf(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// reloadCmd runs `supervisor reload` against the environment's daemon and returns its exit
// code and output.
func (e *e2e) reloadCmd() (int, string) {
	var out bytes.Buffer
	code := runMain(context.Background(), []string{"reload", "--state-dir", e.stateDir}, noEnv, &out, &out)
	return code, out.String()
}

// countLogs counts the daemon's log lines with message msg about chatKey (the log file is the
// daemon's stderr, which every image of it writes).
func countLogs(d *daemonProc, msg, chatKey string) int {
	n := 0
	for _, l := range d.logsWith(msg) {
		if l.str("chat_key") == chatKey {
			n++
		}
	}
	return n
}

// A reload replaces the daemon's image with the binary now on disk: same pid, the new file,
// the chat's warm child kept (same pid, its next turn has no spawn and no resume), twice in a
// row: the children are forked by the main thread, which every exec keeps, so the
// parent-death signal never reaches them.
func TestE2EReloadKeepsWarmChildren(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true})
	installReloadable(t, e)
	d := e.start()
	c := newLocalClient(t, d)
	if r := c.send("warm", "first message"); r.Status != "completed" {
		t.Fatalf("first reply: %+v", r)
	}
	doc := d.status()
	kids := chatChildren(doc)
	if len(kids) != 1 {
		t.Fatalf("want one chat child, got %+v", kids)
	}
	key, pid := kids[0].ChatKey, kids[0].PID
	child := procOf(t, pid)
	spawned := countLogs(d, "codex app-server started", key)
	inheritedAtStart := inheritableFDs(t, d.pid)

	for round := 1; round <= 2; round++ {
		ino := installBin(t, e.bin)
		code, out := e.reloadCmd()
		if code != 0 {
			t.Fatalf("reload %d: exit %d: %s\n%s", round, code, out, d.logTail(40))
		}
		doc := d.status()
		if doc.Daemon.PID != d.pid {
			t.Fatalf("reload %d: daemon pid %d, want %d", round, doc.Daemon.PID, d.pid)
		}
		if doc.Daemon.Reloads != round || doc.Daemon.LastReload == nil || doc.Daemon.LastReload.Outcome != reloadOK ||
			doc.Daemon.LastReload.Children != 1 {
			t.Fatalf("reload %d: status says reloads %d, last %+v", round, doc.Daemon.Reloads, doc.Daemon.LastReload)
		}
		var st syscall.Stat_t
		if err := syscall.Stat("/proc/"+itoa(d.pid)+"/exe", &st); err != nil || st.Ino != ino {
			t.Fatalf("reload %d: the daemon runs inode %d (err %v), want the new file's %d", round, st.Ino, err, ino)
		}
		if got := childPID(doc, key); got != pid || procOf(t, pid) != child {
			t.Fatalf("reload %d: chat child is pid %d, want the same process %d", round, got, pid)
		}
		if open := inheritableFDs(t, d.pid); !slices.Equal(open, inheritedAtStart) {
			t.Fatalf("reload %d: descriptors without close-on-exec: %v; at start (from the test's environment): %v",
				round, open, inheritedAtStart)
		}
		if r := c.send("warm", "after reload "+itoa(round)); r.Status != "completed" || r.Text == "" {
			t.Fatalf("reload %d: reply %+v", round, r)
		}
	}
	if n := countLogs(d, "codex app-server started", key); n != spawned {
		t.Fatalf("the warm chat spawned %d children after the reloads (%d before)", n-spawned, spawned)
	}
	if n := countLogs(d, "codex child ready", key); n != 1 {
		t.Fatalf("the chat's thread was opened %d times, want once (no resume after a reload)", n)
	}
	if n := countLogs(d, "codex app-server adopted from the previous image of the daemon", key); n != 2 {
		t.Fatalf("adopted %d times, want 2", n)
	}
	d.stop(stopTimeout)
	d.checkLog()
}

// A new binary that cannot take over is refused before anything stops: a script that exits 1,
// a file that is not a program, a program that prints something else, one that reads no
// handoff version this daemon writes. The old image serves on with its warm child, says why,
// and a good binary then reloads.
func TestE2EReloadRefusesBrokenBinary(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true})
	installReloadable(t, e)
	d := e.start("--metrics-listen", "127.0.0.1:0")
	c := newLocalClient(t, d)
	if r := c.send("warm", "first message"); r.Status != "completed" {
		t.Fatalf("first reply: %+v", r)
	}
	key := chatChildren(d.status())[0].ChatKey
	metricsAddr := d.status().Daemon.MetricsListen
	pid := childPID(d.status(), key)
	for _, tc := range []struct {
		name, data, says string
	}{
		{"exits 1", "#!/bin/sh\necho broken >&2\nexit 1\n", "exit status 1"},
		{"not a program", "this is not a program\n", "exec format error"},
		{"says other things", "#!/bin/sh\necho hello\n", "not JSON"},
		{"crashes", "#!/bin/sh\nkill -SEGV $$\n", "signal"},
		{"reads another version", "#!/bin/sh\necho '{\"program\":\"codex-warm\",\"version\":\"v9\",\"handoff_readable\":[7]}'\n", fmt.Sprintf("handoff version %d", handoffNeeded())},
	} {
		installData(t, e.bin, []byte(tc.data))
		code, out := e.reloadCmd()
		if code == 0 || !strings.Contains(out, "refused") || !strings.Contains(out, tc.says) {
			t.Fatalf("%s: reload exit %d, want a refusal saying %q:\n%s", tc.name, code, tc.says, out)
		}
		doc := d.status()
		if doc.Daemon.Reloads != 0 || doc.Daemon.LastReload.Outcome != reloadRefused || childPID(doc, key) != pid {
			t.Fatalf("%s: after the refusal: reloads %d, last %+v, child %d (want %d)", tc.name, doc.Daemon.Reloads,
				doc.Daemon.LastReload, childPID(doc, key), pid)
		}
		if r := c.send("warm", "still here after "+tc.name); r.Status != "completed" {
			t.Fatalf("%s: reply %+v", tc.name, r)
		}
	}
	if m := scrapeReloads(t, metricsAddr); m[reloadRefused] != 5 || m[reloadOK] != 0 {
		t.Fatalf("reloads by outcome after the refusals: %v", m)
	}
	installBin(t, e.bin)
	if code, out := e.reloadCmd(); code != 0 {
		t.Fatalf("good binary: reload exit %d: %s", code, out)
	}
	if got := childPID(d.status(), key); got != pid {
		t.Fatalf("child %d after the good reload, want %d", got, pid)
	}
	// The metrics listener was handed over (same address), and the new image counts its reload.
	if got := d.status().Daemon.MetricsListen; got != metricsAddr {
		t.Fatalf("metrics listen on %s after the reload, want %s", got, metricsAddr)
	}
	if m := scrapeReloads(t, metricsAddr); m[reloadOK] != 1 {
		t.Fatalf("reloads by outcome after the reload: %v", m)
	}
	d.stop(stopTimeout)
	d.checkLog()
}

// inheritableFDs lists pid's descriptors above stderr that lack close-on-exec: after a reload
// the new image must have set it again on everything it took over, or the codex children it
// starts would inherit the daemon's sockets and pipes.
func inheritableFDs(t *testing.T, pid int) []string {
	t.Helper()
	dir := "/proc/" + itoa(pid) + "/fdinfo"
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err != nil || n <= 2 {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "flags:"); ok {
				flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
				if err == nil && flags&syscall.O_CLOEXEC == 0 {
					target, _ := os.Readlink("/proc/" + itoa(pid) + "/fd/" + e.Name())
					out = append(out, e.Name()+" ("+target+")")
				}
			}
		}
	}
	return out
}

// scrapeReloads reads codex_warm_reloads_total by outcome from the metrics listener.
func scrapeReloads(t *testing.T, addr string) map[string]int {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	re := regexp.MustCompile(`(?m)^codex_warm_reloads_total\{outcome="(\w+)"\} (\d+)$`)
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		n, _ := strconv.Atoi(m[2])
		out[m[1]] = n
	}
	return out
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// A new binary that passes its preflight but cannot take over (here: it refuses the
// configuration the daemon runs with) gives everything back: it re-executes the previous
// image's executable, kept open across the exec, with the same handoff. The daemon goes on
// with the old binary, the same pid and the same warm child, and says why.
func TestE2EReloadGivenBackByNewBinary(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true})
	oldIno := installReloadable(t, e)
	d := e.start()
	c := newLocalClient(t, d)
	if r := c.send("warm", "first message"); r.Status != "completed" {
		t.Fatalf("first reply: %+v", r)
	}
	pid := childPID(d.status(), "warm")
	real := filepath.Join(e.root, "real-supervisor")
	installBin(t, real)
	installData(t, e.bin, []byte("#!/bin/sh\nif [ \"$1\" = run ]; then exec "+real+" \"$@\" --no-such-flag; fi\nexec "+real+" \"$@\"\n"))
	code, out := e.reloadCmd()
	if code == 0 || !strings.Contains(out, "gave everything back") || !strings.Contains(out, "no-such-flag") {
		t.Fatalf("reload into a binary that refuses the configuration: exit %d:\n%s", code, out)
	}
	doc := d.status()
	if doc.Daemon.PID != d.pid || doc.Daemon.Reloads != 0 || childPID(doc, "warm") != pid {
		t.Fatalf("after the give-back: pid %d reloads %d child %d (want %d, 0, %d)", doc.Daemon.PID, doc.Daemon.Reloads,
			childPID(doc, "warm"), d.pid, pid)
	}
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/"+itoa(d.pid)+"/exe", &st); err != nil || st.Ino != oldIno {
		t.Fatalf("the daemon runs inode %d (%v), want the previous binary's %d", st.Ino, err, oldIno)
	}
	if r := c.send("warm", "still warm"); r.Status != "completed" {
		t.Fatalf("after the give-back: %+v", r)
	}
	if n := countLogs(d, "codex child ready", "warm"); n != 1 {
		t.Fatalf("the chat's thread was opened %d times, want once", n)
	}
	d.stop(stopTimeout)
	d.checkLog()
}

// The exec itself fails (the file vanished between its preflight and the exec): everything
// resumes, the daemon says why, and its descriptors are close-on-exec again.
func TestE2EReloadExecFailureResumes(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true})
	installReloadable(t, e)
	d := e.start()
	c := newLocalClient(t, d)
	if r := c.send("warm", "first message"); r.Status != "completed" {
		t.Fatalf("first reply: %+v", r)
	}
	pid := childPID(d.status(), "warm")
	inheritedAtStart := inheritableFDs(t, d.pid)
	installData(t, e.bin, []byte("#!/bin/sh\nrm -f \"$0\"\necho '{\"program\":\"codex-warm\",\"version\":\"gone\",\"handoff_readable\":[1,2,3]}'\n"))
	code, out := e.reloadCmd()
	if code == 0 || !strings.Contains(out, "reload failed") || !strings.Contains(out, "no such file") {
		t.Fatalf("reload whose exec fails: exit %d:\n%s", code, out)
	}
	doc := d.status()
	if doc.Daemon.LastReload.Outcome != reloadFailed || childPID(doc, "warm") != pid || doc.Daemon.Reloads != 0 {
		t.Fatalf("after the failed exec: %+v, child %d (want %d)", doc.Daemon.LastReload, childPID(doc, "warm"), pid)
	}
	if open := inheritableFDs(t, d.pid); !slices.Equal(open, inheritedAtStart) {
		t.Fatalf("descriptors without close-on-exec after the failed exec: %v (at start %v)", open, inheritedAtStart)
	}
	if r := c.send("warm", "still here"); r.Status != "completed" {
		t.Fatalf("after the failed exec: %+v", r)
	}
	installBin(t, e.bin)
	if code, out := e.reloadCmd(); code != 0 {
		t.Fatalf("reload with the binary back: exit %d: %s", code, out)
	}
	if got := childPID(d.status(), "warm"); got != pid {
		t.Fatalf("child %d after the reload, want %d", got, pid)
	}
	d.stop(stopTimeout)
	d.checkLog()
}

// handoffNeeded is the handoff version a reload of the suite's daemons writes: 3 with shared
// children (make test-shared), else 2.
func handoffNeeded() int {
	if n := testThreadsPerChild(); n != "" && n != "1" {
		return handoff.Version
	}
	return handoff.VersionUnshared
}
