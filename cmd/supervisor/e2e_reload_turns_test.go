//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/inbox/local"
	"github.com/molecule-ai/codex-warm/inbox/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/mockmodel"
)

// holding is how many model requests the gate holds now.
func (g *gate) holding() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held
}

// holdLong is a Script that holds every request whose text starts with "long" at g.
func holdLong(g *gate) func(mockmodel.Request) mockmodel.Reply {
	return func(req mockmodel.Request) mockmodel.Reply {
		if strings.HasPrefix(req.LastUserText, "long") && !req.HasToolOutput {
			if !g.hold(40 * time.Second) {
				return mockmodel.Reply{Text: "gate timed out: " + req.LastUserText}
			}
		}
		return mockmodel.DefaultScript(req)
	}
}

// SIGHUP while three chats' turns run and one chat idles warm: the reload waits for the running
// turns (their callers get their replies, once), a burst of messages sent meanwhile waits in
// the socket's backlog and is answered by the new image, once each, and every chat keeps its
// child.
func TestE2EReloadWaitsForRunningTurns(t *testing.T) {
	t.Parallel()
	g := newGate(0)
	e := newE2E(t, e2eConfig{Local: true, Script: holdLong(g)})
	t.Cleanup(g.release)
	e.bin = filepath.Join(e.root, "supervisor")
	installBin(t, e.bin)
	// Room for every chat's child: an eviction would hide a child lost to the reload.
	d := e.start("--drain-timeout", "60s", "--max-children", "16")
	c := newLocalClient(t, d)
	if r := c.send("idle", "warm up"); r.Status != "completed" {
		t.Fatalf("idle chat: %+v", r)
	}
	var long []<-chan local.Reply
	for i := range 3 {
		long = append(long, c.sendAsync(fmt.Sprintf("busy-%d", i), fmt.Sprintf("long %d", i)))
	}
	d.waitUntil("three turns held by the model", func() bool { return g.holding() == 3 })
	before := d.status()
	pids := map[string]int{}
	for _, ch := range chatChildren(before) {
		pids[ch.ChatKey] = ch.PID
	}
	if len(pids) != 4 {
		t.Fatalf("want 4 chat children, got %v", pids)
	}

	installBin(t, e.bin)
	d.signal(syscall.SIGHUP)
	d.waitUntil("the reload to wait for the turns", func() bool {
		return len(d.logsWith("reload: new binary answers; quiescing")) == 1
	})
	if _, err := d.requestReloadOver(); err == nil || !strings.Contains(err.Error(), errReloadBusy.Error()) {
		t.Fatalf("a reload during the reload: %v, want refused", err)
	}
	var burst []<-chan local.Reply
	for i := range 5 {
		burst = append(burst, c.sendAsync(fmt.Sprintf("burst-%d", i), fmt.Sprintf("burst %d", i)))
	}
	g.release()
	for i, ch := range long {
		if r := <-ch; r.Status != "completed" || !strings.Contains(r.Text, fmt.Sprintf("long %d", i)) {
			t.Fatalf("long turn %d: %+v", i, r)
		}
	}
	for i, ch := range burst {
		if r := <-ch; r.Status != "completed" || !strings.Contains(r.Text, fmt.Sprintf("burst %d", i)) {
			t.Fatalf("burst message %d: %+v", i, r)
		}
	}
	d.waitUntil("the reload to finish", func() bool {
		r := d.status().Daemon.LastReload
		return r != nil && r.Outcome != reloadRunning
	})
	after := d.status()
	if r := after.Daemon.LastReload; r.Outcome != reloadOK || after.Daemon.PID != d.pid || r.Trigger != "SIGHUP" {
		t.Fatalf("reload: %+v (pid %d)", r, after.Daemon.PID)
	}
	for key, pid := range pids {
		if got := childPID(after, key); got != pid {
			t.Errorf("chat %s: child %d after the reload, want %d", key, got, pid)
		}
	}
	for _, text := range []string{"long 0", "long 1", "long 2", "burst 0", "burst 4"} {
		if n := len(e.requestsFor(text)); n != 1 {
			t.Errorf("%q reached the model %d times, want once", text, n)
		}
	}
	if r := c.send("idle", "still warm"); r.Status != "completed" {
		t.Fatalf("idle chat after the reload: %+v", r)
	}
	if n := countLogs(d, "codex child ready", "idle"); n != 1 {
		t.Errorf("the idle chat's thread was opened %d times, want once", n)
	}
	d.stop(stopTimeout)
	d.checkLog()
}

// The Molecule inbox across a reload: the turns running when it starts cross to the new image
// (the reload does not wait for them), and their rows, polled again by the new image, attach
// to them; rows that arrive meanwhile wait for the next image. Each row is answered once, by
// one model request, and every chat keeps its child.
func TestE2EReloadMoleculeTurnsCross(t *testing.T) {
	t.Parallel()
	g := newGate(0)
	e := newE2E(t, e2eConfig{Script: holdLong(g)})
	t.Cleanup(g.release)
	e.bin = filepath.Join(e.root, "supervisor")
	installBin(t, e.bin)
	d := e.start("--drain-timeout", "60s")
	e.plat.Enqueue(moleculetest.CanvasMessage("long canvas"), moleculetest.PeerMessage("peer-1", "long peer"))
	d.waitUntil("two turns held by the model", func() bool { return g.holding() == 2 })
	pids := map[string]int{}
	for _, ch := range chatChildren(d.status()) {
		pids[ch.ChatKey] = ch.PID
	}
	if len(pids) != 2 {
		t.Fatalf("want 2 chat children, got %v", pids)
	}
	installBin(t, e.bin)
	if n, err := d.requestReloadOver(); err != nil {
		t.Fatalf("reload request: %v", err)
	} else if n != 1 {
		t.Fatalf("attempt %d, want 1", n)
	}
	// The turns are still held by the model: the reload goes through without them ending.
	d.waitUntil("the reload to finish", func() bool {
		r := d.status().Daemon.LastReload
		return r != nil && r.Outcome != reloadRunning
	})
	after := d.status()
	if r := after.Daemon.LastReload; r.Outcome != reloadOK || r.Children != 2 {
		t.Fatalf("reload: %+v", r)
	}
	for key, pid := range pids {
		if got := childPID(after, key); got != pid {
			t.Errorf("chat %s: child %d after the reload, want %d", key, got, pid)
		}
	}
	d.waitUntil("both rows polled again and attached to their turns", func() bool {
		return len(d.logsWith("message attached to its turn, handed over by a reload")) == 2
	})
	e.plat.Enqueue(moleculetest.PeerMessage("peer-2", "during the reload"))
	g.release()
	d.waitPlatform("three replies", func() bool { return e.plat.Deliveries() >= 3 })
	d.waitPolls(3)
	for _, text := range []string{"long canvas", "long peer", "during the reload"} {
		if n := len(e.requestsFor(text)); n != 1 {
			t.Errorf("%q reached the model %d times, want once", text, n)
		}
		if n := e.repliesContaining(text); n != 1 {
			t.Errorf("%q answered %d times, want once", text, n)
		}
	}
	if n := e.plat.Deliveries(); n != 3 {
		t.Errorf("%d deliveries, want 3", n)
	}
	for key := range pids {
		if n := countLogs(d, "codex child ready", key); n != 1 {
			t.Errorf("chat %s: its thread was opened %d times, want once", key, n)
		}
	}
	d.stop(stopTimeout)
	d.checkLog()
}

// A SIGKILL while a reload waits for running turns, then a restart: no Molecule row is lost.
func TestE2EReloadKilledThenRestartedLosesNoRow(t *testing.T) {
	t.Parallel()
	g := newGate(0)
	e := newE2E(t, e2eConfig{Script: holdLong(g)})
	t.Cleanup(g.release)
	e.bin = filepath.Join(e.root, "supervisor")
	installBin(t, e.bin)
	d := e.start("--drain-timeout", "60s")
	e.plat.Enqueue(moleculetest.CanvasMessage("long canvas"), moleculetest.PeerMessage("peer-1", "long peer"))
	d.waitUntil("two turns held by the model", func() bool { return g.holding() == 2 })
	d.signal(syscall.SIGHUP)
	d.waitUntil("the reload to wait for the turns", func() bool {
		return len(d.logsWith("reload: new binary answers; quiescing")) == 1
	})
	d.kill()
	g.release()
	d2 := e.start()
	d2.waitPlatform("both rows answered", func() bool {
		return e.repliesContaining("long canvas") >= 1 && e.repliesContaining("long peer") >= 1
	})
	d2.stop(stopTimeout)
	d2.checkLog()
}

// repliesContaining counts the replies delivered to the platform that contain text.
func (e *e2e) repliesContaining(text string) int {
	n := 0
	for _, m := range e.plat.Notifies() {
		if strings.Contains(m.Message, text) {
			n++
		}
	}
	for _, s := range e.plat.A2ASends() {
		if strings.Contains(s.Text, text) {
			n++
		}
	}
	return n
}

// requestReloadOver asks the daemon to reload over its control socket, as `supervisor reload`
// does, without waiting for the outcome.
func (d *daemonProc) requestReloadOver() (int, error) {
	code, body, err := controlDo(context.Background(), d.e.stateDir, http.MethodPost, "/v1/reload", waitTimeout)
	if err != nil {
		return 0, err
	}
	var ans ReloadAnswer
	if err := json.Unmarshal(body, &ans); err != nil || code != http.StatusAccepted {
		return 0, fmt.Errorf("HTTP %d: %s", code, body)
	}
	return ans.Attempt, nil
}

// An approval waiting for its answer holds its turn, so a reload cannot quiesce: at
// --drain-timeout it is refused, and the approval is then answered as if nothing had happened.
// Once the turn is done, the reload goes through and keeps the child.
func TestE2EReloadWithPendingApproval(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true, Script: approvalScript})
	e.bin = filepath.Join(e.root, "supervisor")
	installBin(t, e.bin)
	d := e.start(append(approvalArgs(time.Minute), "--drain-timeout", "2s")...)
	c := newLocalClient(t, d)
	first := c.send("k", "hello")
	reply := c.sendAsync("k", "run it")
	d.waitUntil("the approval to be asked", func() bool {
		_, ok := c.pendingApproval("k")
		return ok
	})
	pid := childPID(d.status(), "k")
	installBin(t, e.bin)
	code, out := e.reloadCmd()
	if code == 0 || !strings.Contains(out, "refused") || !strings.Contains(out, "in flight") {
		t.Fatalf("reload with an approval pending: exit %d:\n%s", code, out)
	}
	if r := c.send("k", "/approve"); r.Status != local.StatusCommand || !strings.HasPrefix(r.Text, "approved ") {
		t.Fatalf("/approve after the refused reload: %+v", r)
	}
	if r := <-reply; r.Status != "completed" || !strings.Contains(r.Text, "Process exited with code 0") || r.ThreadID != first.ThreadID {
		t.Fatalf("reply %+v", r)
	}
	if code, out := e.reloadCmd(); code != 0 {
		t.Fatalf("reload once the turn is done: exit %d:\n%s", code, out)
	}
	if got := childPID(d.status(), "k"); got != pid {
		t.Fatalf("child %d after the reload, want %d", got, pid)
	}
	if r := c.send("k", "after"); r.Status != "completed" || r.ThreadID != first.ThreadID {
		t.Fatalf("after the reload: %+v", r)
	}
	d.stop(stopTimeout)
	d.checkLog()
}
