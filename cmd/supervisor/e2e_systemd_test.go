//go:build linux

package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeNotify is the service manager's end of NOTIFY_SOCKET: it keeps every datagram.
type fakeNotify struct {
	path string
	mu   sync.Mutex
	msgs []string
	more chan struct{} // closed and replaced at each message
}

func newFakeNotify(t *testing.T) *fakeNotify {
	t.Helper()
	dir, err := os.MkdirTemp("", "cwsd") // short: a socket path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	n := &fakeNotify{path: filepath.Join(dir, "notify"), more: make(chan struct{})}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: n.path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = conn.Close()
		wg.Wait()
	})
	wg.Go(func() {
		buf := make([]byte, 4096)
		for {
			k, err := conn.Read(buf)
			if err != nil {
				return
			}
			n.mu.Lock()
			n.msgs = append(n.msgs, string(buf[:k]))
			close(n.more)
			n.more = make(chan struct{})
			n.mu.Unlock()
		}
	})
	return n
}

// index returns the position of the first message from position from on that starts with
// prefix, or -1 and a channel closed at the next message.
func (n *fakeNotify) index(prefix string, from int) (int, <-chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := max(from, 0); i < len(n.msgs); i++ {
		if strings.HasPrefix(n.msgs[i], prefix) {
			return i, nil
		}
	}
	return -1, n.more
}

// wait waits for a message starting with prefix from position from on and returns its
// position. The datagrams a daemon sent before it exited are still read after.
func (n *fakeNotify) wait(d *daemonProc, prefix string, from int) int {
	d.e.t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		i, more := n.index(prefix, from)
		if i >= 0 {
			return i
		}
		select {
		case <-more:
		case <-deadline.C:
			d.e.t.Fatalf("no %q from the daemon on NOTIFY_SOCKET within %s; got %q\n%s", prefix, waitTimeout, n.all(), d.logTail(3000))
		}
	}
}

func (n *fakeNotify) all() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.msgs)
}

func (n *fakeNotify) msg(i int) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.msgs[i]
}

// Under systemd (Type=notify, a fake NOTIFY_SOCKET here), the daemon says READY=1 once it
// serves, pings the watchdog (WATCHDOG_USEC) from a loop that checks its own loops, says
// RELOADING=1 with MONOTONIC_USEC when a reload begins and READY=1 from the new image (whose
// watchdog goes on), and STOPPING=1 when it drains. Its codex children never see the service
// manager's variables.
func TestE2ESystemdNotify(t *testing.T) {
	t.Parallel()
	n := newFakeNotify(t)
	e := newE2E(t, e2eConfig{Local: true, Env: []string{"NOTIFY_SOCKET=" + n.path, "WATCHDOG_USEC=300000"}})
	installReloadable(t, e)
	d := e.start()
	ready := n.wait(d, "READY=1", 0)
	n.wait(d, "WATCHDOG=1", n.wait(d, "WATCHDOG=1", ready)+1)
	c := newLocalClient(t, d)
	if r := c.send("warm", "first message"); r.Status != "completed" {
		t.Fatalf("first reply: %+v", r)
	}
	for _, ch := range d.status().Snapshot.Children {
		if ch.PID == 0 {
			continue // starting
		}
		environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", ch.PID))
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range strings.Split(string(environ), "\x00") {
			for _, name := range serviceManagerEnv() {
				if strings.HasPrefix(kv, name+"=") {
					t.Errorf("codex child %d has %s", ch.PID, kv)
				}
			}
		}
	}
	installBin(t, e.bin)
	if code, out := e.reloadCmd(); code != 0 {
		t.Fatalf("reload: exit %d: %s", code, out)
	}
	reloading := n.wait(d, "RELOADING=1", ready+1)
	if m := n.msg(reloading); !strings.Contains(m, "\nMONOTONIC_USEC=") {
		t.Errorf("reloading message %q has no MONOTONIC_USEC", m)
	}
	again := n.wait(d, "READY=1", reloading+1)
	n.wait(d, "WATCHDOG=1", again+1)
	d.stop(stopTimeout)
	n.wait(d, "STOPPING=1", again+1)
}
