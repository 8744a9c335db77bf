//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/local"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
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

// startReloadableHolding starts a daemon on the local inbox, with a binary a reload can
// replace, whose model holds each turn on the gate it returns (holdLong) until the test
// releases it; args are the daemon's flags.
func startReloadableHolding(t *testing.T, args ...string) (*e2e, *daemonProc, *gate) {
	t.Helper()
	g := newGate(0)
	e := newE2E(t, e2eConfig{Local: true, Script: holdLong(g)})
	t.Cleanup(g.release)
	installReloadable(t, e)
	return e, e.start(args...), g
}

// SIGHUP while three chats' turns run (one with a message queued behind its turn) and one chat
// idles warm: the reload does not wait for the turns. They cross to the new image with their
// callers' connections, and the model answers only after the reload; each caller gets its
// reply once, the queued message runs after its chat's turn, a burst of messages sent during
// the reload waits in the socket's backlog and is answered by the new image once each, and
// every chat keeps its child (the idle one's next turn has no spawn and no resume).
func TestE2EReloadTurnsCross(t *testing.T) {
	t.Parallel()
	g := newGate(0)
	e := newE2E(t, e2eConfig{Local: true, Script: holdLong(g)})
	t.Cleanup(g.release)
	installReloadable(t, e)
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
	queued := c.sendAsync("busy-0", "queued behind long 0")
	d.waitUntil("a message queued behind a running turn", func() bool {
		for _, ch := range chatChildren(d.status()) {
			if ch.ChatKey == "busy-0" && ch.Queued == 1 {
				return true
			}
		}
		return false
	})
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
	d.waitUntil("the reload to quiesce", func() bool {
		return len(d.logsWith("reload: new binary answers; quiescing")) == 1
	})
	var burst []<-chan local.Reply
	for i := range 5 {
		burst = append(burst, c.sendAsync(fmt.Sprintf("burst-%d", i), fmt.Sprintf("burst %d", i)))
	}
	// The model still holds the three turns: the reload goes through without them ending.
	// Watched in the log, not by status: a status request may meet the exec itself.
	d.waitUntil("the new image to take over", func() bool {
		return len(d.logsWith("reload: took over from the previous image")) == 1
	})
	after := waitReloadServed(d)
	if r := after.Daemon.LastReload; r.Outcome != reloadOK || after.Daemon.PID != d.pid || r.Trigger != "SIGHUP" || r.Children != childrenFor(t, 4) ||
		r.Turns != 3 || r.Callers != 4 {
		t.Fatalf("reload: %+v (pid %d)", r, after.Daemon.PID)
	}
	if g.holding() != 3 {
		t.Fatalf("the model holds %d turns after the reload, want 3", g.holding())
	}
	if n := len(d.logsWith("the message's turn crosses the reload; its connection is handed over")); n != 4 {
		t.Fatalf("%d connections handed over, want 4 (3 running turns, 1 queued message)", n)
	}
	g.release()
	for i, ch := range long {
		if r := <-ch; r.Status != "completed" || !strings.Contains(r.Text, fmt.Sprintf("long %d", i)) {
			t.Fatalf("long turn %d: %+v", i, r)
		}
	}
	if r := <-queued; r.Status != "completed" || !strings.Contains(r.Text, "queued behind long 0") {
		t.Fatalf("queued message: %+v", r)
	}
	for i, ch := range burst {
		if r := <-ch; r.Status != "completed" || !strings.Contains(r.Text, fmt.Sprintf("burst %d", i)) {
			t.Fatalf("burst message %d: %+v", i, r)
		}
	}
	after = d.status()
	for key, pid := range pids {
		if got := childPID(after, key); got != pid {
			t.Errorf("chat %s: child %d after the reload, want %d", key, got, pid)
		}
	}
	for _, text := range []string{"long 0", "long 1", "long 2", "queued behind long 0", "burst 0", "burst 4"} {
		if n := len(e.requestsFor(text)); n != 1 {
			t.Errorf("%q reached the model %d times, want once", text, n)
		}
	}
	// The queued message ran after its chat's turn, on the same thread.
	if q := e.requestsFor("queued behind long 0"); len(q) == 1 && !slices.Contains(q[0].UserTexts, "long 0") {
		t.Errorf("the queued message's conversation %q lacks the turn it waited for", q[0].UserTexts)
	}
	if r := c.send("idle", "still warm"); r.Status != "completed" {
		t.Fatalf("idle chat after the reload: %+v", r)
	}
	wantThreadsOpenedOnce(t, d, pids)
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
	installReloadable(t, e)
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
	// A burst of rows during the reload: some reach the old image, some the new one.
	burst := []string{"burst a", "burst b", "burst c", "burst d"}
	for i, text := range burst {
		e.plat.Enqueue(moleculetest.PeerMessage(fmt.Sprintf("peer-b%d", i), text))
	}
	// The turns are still held by the model: the reload goes through without them ending.
	// Watched in the log, not by status: a status request may meet the exec itself.
	d.waitUntil("the new image to take over", func() bool {
		return len(d.logsWith("reload: took over from the previous image")) == 1
	})
	after := waitReloadServed(d)
	if r := after.Daemon.LastReload; r.Outcome != reloadOK || r.Children < childrenFor(t, 2) {
		t.Fatalf("reload: %+v", r)
	}
	for key, pid := range pids {
		if got := childPID(after, key); got != pid {
			t.Errorf("chat %s: child %d after the reload, want %d", key, got, pid)
		}
	}
	d.waitUntil("both rows polled again and attached to their turns", func() bool {
		n := 0
		for _, l := range d.logsWith("message attached to its turn, handed over by a reload") {
			if l.str("message_id") == "act-1" || l.str("message_id") == "act-2" {
				n++
			}
		}
		return n == 2
	})
	e.plat.Enqueue(moleculetest.PeerMessage("peer-2", "during the reload"))
	g.release()
	d.waitPlatform("every row answered", func() bool { return e.plat.Deliveries() >= 3+len(burst) })
	d.waitPolls(3)
	for _, text := range append([]string{"long canvas", "long peer", "during the reload"}, burst...) {
		if n := len(e.requestsFor(text)); n != 1 {
			t.Errorf("%q reached the model %d times, want once", text, n)
		}
		if n := e.repliesContaining(text); n != 1 {
			t.Errorf("%q answered %d times, want once", text, n)
		}
	}
	if n := e.plat.Deliveries(); n != 3+len(burst) {
		t.Errorf("%d deliveries, want %d", n, 3+len(burst))
	}
	wantThreadsOpenedOnce(t, d, pids)
	d.stop(stopTimeout)
	d.checkLog()
}

// A SIGKILL during a reload (as it hands the running turns over, or just after the exec), then
// a restart: no Molecule row is lost; the rows whose turns were running are answered by the
// restarted daemon.
func TestE2EReloadKilledThenRestartedLosesNoRow(t *testing.T) {
	t.Parallel()
	g := newGate(0)
	e := newE2E(t, e2eConfig{Script: holdLong(g)})
	t.Cleanup(g.release)
	installReloadable(t, e)
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

// An approval waiting for its answer crosses a reload with its turn: the reload goes through
// at once, the approval is still pending afterwards (same request, same number), /approve
// after the reload answers it, the turn completes, and its caller gets the reply on the
// connection the new image took over. The child is the same all along.
func TestE2EReloadWithPendingApproval(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true, Script: approvalScript})
	installReloadable(t, e)
	d := e.start(append(approvalArgs(time.Minute), "--drain-timeout", "60s")...)
	c := newLocalClient(t, d)
	first := c.send("k", "hello")
	reply := c.sendAsync("k", "run it")
	var asked local.Approval
	d.waitUntil("the approval to be asked", func() bool {
		var ok bool
		asked, ok = c.pendingApproval("k")
		return ok
	})
	pid := childPID(d.status(), "k")
	installBin(t, e.bin)
	if code, out := e.reloadCmd(); code != 0 {
		t.Fatalf("reload with an approval pending: exit %d:\n%s", code, out)
	}
	if r := d.status().Daemon.LastReload; r.Outcome != reloadOK || r.Children != 1 {
		t.Fatalf("reload: %+v", r)
	}
	var again local.Approval
	d.waitUntil("the approval to be asked again by the new image", func() bool {
		var ok bool
		again, ok = c.pendingApproval("k")
		return ok
	})
	if again.RequestID != asked.RequestID || again.Number != asked.Number || again.TurnID != asked.TurnID {
		t.Fatalf("approval after the reload %+v, before %+v", again, asked)
	}
	if r := c.send("k", "/approve"); r.Status != local.StatusCommand || !strings.HasPrefix(r.Text, "approved ") {
		t.Fatalf("/approve after the reload: %+v", r)
	}
	if r := <-reply; r.Status != "completed" || !strings.Contains(r.Text, "Process exited with code 0") || r.ThreadID != first.ThreadID {
		t.Fatalf("reply %+v", r)
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

// A reload whose exec fails while a turn runs and a message waits behind it: the old image
// takes back the turn it had handed over and the callers' connections, and each caller gets
// its reply once, in order, from the same child.
func TestE2EReloadExecFailureKeepsRunningTurn(t *testing.T) {
	t.Parallel()
	e, d, g := startReloadableHolding(t, "--drain-timeout", "60s")
	c := newLocalClient(t, d)
	running := c.sendAsync("k", "long running")
	d.waitUntil("the turn held by the model", func() bool { return g.holding() == 1 })
	queued := c.sendAsync("k", "queued behind it")
	d.waitUntil("a message queued behind the turn", func() bool {
		for _, ch := range chatChildren(d.status()) {
			if ch.ChatKey == "k" && ch.Queued == 1 {
				return true
			}
		}
		return false
	})
	pid := childPID(d.status(), "k")
	installData(t, e.bin, []byte("#!/bin/sh\nrm -f \"$0\"\necho '{\"program\":\"codex-warm\",\"version\":\"gone\",\"handoff_readable\":[1,2,3]}'\n"))
	code, out := e.reloadCmd()
	if code == 0 || !strings.Contains(out, "reload failed") {
		t.Fatalf("reload whose exec fails: exit %d:\n%s", code, out)
	}
	if n := len(d.logsWith("the message's turn crosses the reload; its connection is handed over")); n != 2 {
		t.Fatalf("%d connections taken for the handoff, want 2", n)
	}
	d.waitUntil("the running message attached again to its turn", func() bool {
		return len(d.logsWith("message attached to its turn, handed over by a reload")) == 1
	})
	g.release()
	if r := <-running; r.Status != "completed" || !strings.Contains(r.Text, "long running") {
		t.Fatalf("running turn: %+v", r)
	}
	if r := <-queued; r.Status != "completed" || !strings.Contains(r.Text, "queued behind it") {
		t.Fatalf("queued message: %+v", r)
	}
	for _, text := range []string{"long running", "queued behind it"} {
		if n := len(e.requestsFor(text)); n != 1 {
			t.Errorf("%q reached the model %d times, want once", text, n)
		}
	}
	if got := childPID(d.status(), "k"); got != pid {
		t.Fatalf("child %d after the failed reload, want %d", got, pid)
	}
	d.stop(stopTimeout)
	d.checkLog()
}
