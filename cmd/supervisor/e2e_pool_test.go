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

	"github.com/molecule-ai/codex-warm/bridge/moleculetest"
	"github.com/molecule-ai/codex-warm/mockmodel"
)

// Nine chats whose messages arrive in one poll run nine turns at once when the pool has nine
// slots: the Molecule inbox adds no limit of its own below the pool's. The mock model holds every
// answer until nine model calls are open together (a barrier: a counter and a channel); an inbox
// capped below nine never gets there, so no reply comes and the wait fails at its deadline,
// naming the most calls that were open at once.
func TestE2EMoleculeRunsAsManyTurnsAsThePool(t *testing.T) {
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
	for _, c := range d.status().Snapshot.Children {
		pids[c.PID] = true
	}
	if len(pids) != chats {
		t.Errorf("%d codex children, want %d: one per chat", len(pids), chats)
	}
	d.stop(stopTimeout)
}
