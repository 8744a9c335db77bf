package earlysignal

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

const helperEnv = "EARLYSIGNAL_TEST_HELPER"

// TestMain's helper mode is a process started as a reloaded image is (EnvHandoff set): it sends
// itself SIGTERM, SIGINT and SIGHUP and prints what Take's channels received. Without the
// channels those signals would end it.
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "" {
		os.Exit(m.Run())
	}
	c := Take()
	if c == nil {
		fmt.Println("nothing caught")
		os.Exit(1)
	}
	if Take() != nil {
		fmt.Println("taken twice")
		os.Exit(1)
	}
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT} {
		if err := syscall.Kill(os.Getpid(), sig); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
	}
	fmt.Println("reload:", <-c.Reload, "stop:", <-c.Stop, <-c.Stop)
	os.Exit(0)
}

// A reloaded image catches its signals at initialization; any other process catches nothing
// here (its signals keep Go's defaults until main decides).
func TestCaughtOnlyInAReloadedImage(t *testing.T) {
	if Take() != nil {
		t.Fatal("caught signals in a process started without a handoff")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1", EnvHandoff+"=3")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	// Pending signals are delivered by number, not in the order sent.
	got := strings.TrimSpace(string(out))
	if !strings.HasPrefix(got, "reload: hangup stop: ") || !strings.Contains(got, "terminated") || !strings.Contains(got, "interrupt") {
		t.Fatalf("helper said %q", got)
	}
}
