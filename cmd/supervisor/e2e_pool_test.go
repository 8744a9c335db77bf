//go:build linux

package main

// The pool is the one limit on concurrent turns: the Molecule inbox runs as many turns at once
// as the supervisor has slots, on the real daemon process with real codex.

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// Nine chats whose messages arrive in one poll run nine turns at once when the pool has nine
// slots: the Molecule inbox adds no limit of its own below the pool's. The mock model holds every
// answer until nine model calls are open together (a barrier: a counter and a channel); an inbox
// capped below nine never gets there, so no reply comes and the wait fails at its deadline,
// naming the most calls that were open at once.
func TestE2EMoleculeRunsAsManyTurnsAsThePool(t *testing.T) {
	t.Parallel()
	const chats = 9
	var arrived atomic.Int32
	barrier := make(chan struct{})
	script := func(req mockmodel.Request) mockmodel.Reply {
		r := mockmodel.DefaultScript(req)
		if strings.HasPrefix(req.LastUserText, "pool/") && !req.HasToolOutput {
			if arrived.Add(1) == chats {
				close(barrier)
			}
			r.Hold = barrier
		}
		return r
	}
	e := newE2E(t, e2eConfig{Script: script})
	d := e.start("--max-children", strconv.Itoa(chats))

	var rows []moleculetest.Row
	var want []string
	for i := range chats {
		text := fmt.Sprintf("pool/%d", i)
		want = append(want, "reply #1: "+text)
		if i == 0 {
			rows = append(rows, moleculetest.CanvasMessage(text))
		} else {
			rows = append(rows, moleculetest.PeerMessage(fmt.Sprintf("peer-%d", i), text))
		}
	}
	e.plat.Enqueue(rows...)

	ctx, cancel := d.waitCtx()
	defer cancel()
	if err := e.plat.WaitFor(ctx, func() bool { return e.plat.Deliveries() >= chats }); err != nil {
		t.Fatalf("waiting for %d replies: %v; at most %d model calls were open at once (%d arrived), want %d: "+
			"the inbox ran fewer turns at once than the pool has slots\ndaemon log:\n%s",
			chats, err, e.mock.MaxInFlight(), arrived.Load(), chats, d.logTail(4000))
	}
	for _, text := range want {
		if n := e.countReplies(text); n != 1 {
			t.Errorf("reply %q delivered %d times, want once", text, n)
		}
	}
	if most := e.mock.MaxInFlight(); most != chats {
		t.Errorf("at most %d model calls open at once, want %d", most, chats)
	}
	pids := map[int]bool{}
	for _, c := range chatChildren(d.status()) {
		pids[c.PID] = true
	}
	if want := childrenFor(t, chats); len(pids) != want {
		t.Errorf("%d codex children, want %d: one per chat, or %s to a child", len(pids), want, testThreadsPerChild())
	}
	d.stop(stopTimeout)
}

// With one codex slot and a short slot wait, the second of two chats is refused busy while the
// first one's turn runs. It is not answered "busy": its row stays unacknowledged and is tried
// again until the slot frees (the first chat's idle child is evicted for it), and both chats get
// codex's answer.
func TestE2EMoleculeBusyPoolRetriesInsteadOfAnsweringBusy(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	script := func(req mockmodel.Request) mockmodel.Reply {
		r := mockmodel.DefaultScript(req)
		if strings.HasPrefix(req.LastUserText, "busy/") {
			r.Hold = release
		}
		return r
	}
	e := newE2E(t, e2eConfig{Script: script})
	// One slot: one child of one thread (a shared child has --threads-per-child slots, and the
	// pool is full the same way at --max-children × N chats: supervisor's shared tests).
	d := e.start("--max-children", "1", "--threads-per-child", "1", "--slot-wait", "200ms")
	e.plat.Enqueue(moleculetest.CanvasMessage("busy/canvas"), moleculetest.PeerMessage("peer-1", "busy/peer"))

	// One turn holds the only slot; the other chat is refused and waits for its next try.
	d.waitRequests(1)
	d.waitUntil("a busy answer tried again (or a reply)", func() bool {
		return d.bridgeStats().BusyRetries >= 1 || e.plat.Deliveries() > 0
	})
	if n := e.plat.Deliveries(); n != 0 {
		t.Fatalf("%d replies while the first turn is held, want none: %q %+v", n, e.notifyTexts(), e.plat.A2ASends())
	}
	close(release)
	d.waitPlatform("both replies", func() bool { return e.plat.Deliveries() >= 2 })
	for _, text := range []string{"reply #1: busy/canvas", "reply #1: busy/peer"} {
		if n := e.countReplies(text); n != 1 {
			t.Errorf("reply %q delivered %d times, want once", text, n)
		}
	}
	if n := e.plat.Deliveries(); n != 2 {
		t.Errorf("%d replies, want 2: no busy reply beside the answers", n)
	}
	// The platform holds a reply before the daemon has its answer and counts it.
	d.waitUntil("both replies counted and acknowledged", func() bool {
		s := d.bridgeStats()
		return s.Delivered == 2 && s.Unacked == 0
	})
	if s := d.bridgeStats(); s.CodexFailures != 0 {
		t.Errorf("bridge stats = %+v", s)
	}
	d.stop(stopTimeout)
}
