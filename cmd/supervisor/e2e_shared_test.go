package main

import (
	"strings"
	"syscall"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/local"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// Shared children (--threads-per-child 8, whatever make test-shared sets): real codex, the local
// inbox.

// A turn hung in a shared child (the model never answers) holds no other chat of that child,
// and /stop ends it; both chats go on with their history, in the same child.
func TestE2ESharedChildHungTurnHoldsNoNeighbour(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true, Script: func(req mockmodel.Request) mockmodel.Reply {
		if req.LastUserText == "hang here" {
			return mockmodel.Reply{Hang: true}
		}
		return mockmodel.DefaultScript(req)
	}})
	d := e.start("--threads-per-child", "8")
	c := newLocalClient(t, d)
	a := c.send("a", "first")
	b := c.send("b", "first")
	pid := childPID(d.status(), "a")
	if childPID(d.status(), "b") != pid {
		t.Fatalf("chats a and b in children %d and %d, want one shared child", pid, childPID(d.status(), "b"))
	}
	hung := c.sendAsync("a", "hang here")
	d.waitHung(1)
	if r := c.send("b", "beside it"); r.Text != "reply #2: beside it" {
		t.Fatalf("chat b beside the hung turn: %+v", r)
	}
	if r := c.send("a", "/stop"); r.Status != local.StatusCommand || !strings.HasPrefix(r.Text, "stopped") {
		t.Fatalf("/stop: %+v", r)
	}
	if r := <-hung; r.Status != local.StatusStopped {
		t.Errorf("hung message after /stop: %+v", r)
	}
	ra := c.send("a", "after")
	rb := c.send("b", "after")
	if ra.ThreadID != a.ThreadID || rb.ThreadID != b.ThreadID || childPID(d.status(), "a") != pid || childPID(d.status(), "b") != pid {
		t.Errorf("after the stop: a %+v, b %+v; want both threads in child %d", ra, rb, pid)
	}
	if reqs := e.requestsFor("after"); len(reqs) != 2 {
		t.Errorf("the model saw \"after\" %d times, want once per chat", len(reqs))
	}
	d.stop(stopTimeout)
}

// A shared child SIGKILLed while two of its chats are mid-turn: every message is answered
// exactly once (the two with the dead child's failure), no codex process is left of it, and
// every chat's next message runs on its own thread with its history, in a new child.
func TestE2ESharedChildKilledMidTurn(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true, Script: func(req mockmodel.Request) mockmodel.Reply {
		if strings.HasPrefix(req.LastUserText, "slow") {
			return mockmodel.Reply{Hang: true}
		}
		return mockmodel.DefaultScript(req)
	}})
	d := e.start("--threads-per-child", "8")
	c := newLocalClient(t, d)
	threads := map[string]string{}
	for _, k := range []string{"a", "b", "c"} {
		threads[k] = c.send(k, "first").ThreadID
	}
	pid := childPID(d.status(), "a")
	ra, rb := c.sendAsync("a", "slow a"), c.sendAsync("b", "slow b")
	d.waitHung(2)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for k, ch := range map[string]<-chan local.Reply{"a": ra, "b": rb} {
		r := <-ch
		// The local inbox answers a watchdog's end with an error document naming it.
		if !strings.Contains(r.Text, `"watchdog":"child_died"`) {
			t.Errorf("chat %s's message mid-turn at the kill: %+v, want the dead child's failure", k, r)
		}
		select {
		case extra := <-ch:
			t.Errorf("chat %s answered twice: %+v", k, extra)
		default:
		}
	}
	d.waitUntil("the killed child out of the table", func() bool {
		for _, k := range []string{"a", "b", "c"} {
			if childPID(d.status(), k) == pid {
				return false
			}
		}
		return true
	})
	for _, k := range []string{"a", "b", "c"} {
		r := c.send(k, "again")
		if r.ThreadID != threads[k] || r.Status != protocol.TurnCompleted {
			t.Errorf("chat %s after the kill: %+v, want its thread %s", k, r, threads[k])
		}
		reqs := e.requestsFor("again")
		found := false
		for _, q := range reqs {
			if len(q.UserTexts) > 0 && q.UserTexts[0] == "first" && q.LastUserText == "again" {
				found = true
			}
		}
		if !found {
			t.Errorf("chat %s after the kill: the model did not see its history", k)
		}
	}
	d.stop(stopTimeout)
}
