package main

import (
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
)

// The soak finds its processes through the project's /proc reader: by the CODEX_HOME marker in
// their environment, or as the codex binary below the soak; a zombie is not listed.
func TestProcMatcherScan(t *testing.T) {
	sleepBin, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	exe, err := resolveExe(sleepBin)
	if err != nil {
		t.Fatal(err)
	}
	marker := "CODEX_HOME=" + t.TempDir()
	cmd := exec.Command(sleepBin, "1000")
	cmd.Env = append(os.Environ(), marker)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	pid := cmd.Process.Pid
	want := proc{PID: pid, PPID: os.Getpid(), Exe: exe, Cmd: sleepBin + " 1000"}
	for _, m := range []procMatcher{
		{envMarker: []byte(marker), codexBin: "/no/such/codex", self: os.Getpid()},     // by the marker
		{envMarker: []byte("CODEX_HOME=/elsewhere"), codexBin: exe, self: os.Getpid()}, // by binary and parent
	} {
		var found []proc
		// Until the child has exec'd, /proc shows the test binary.
		for deadline := time.Now().Add(30 * time.Second); !slices.Contains(found, want); {
			if time.Now().After(deadline) {
				t.Fatalf("scan with %+v = %v, want it to hold %v", m, found, want)
			}
			if found, err = m.scan(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	m := procMatcher{envMarker: []byte(marker), codexBin: exe, self: os.Getpid()}
	if !m.isOurCodex(pid) {
		t.Errorf("isOurCodex(%d) = false for a process with the binary and the marker", pid)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if m.isOurCodex(pid) {
		t.Errorf("isOurCodex(%d) = true after it was reaped", pid)
	}
}
