package main

import (
	"testing"

	"github.com/molecule-ai/codex-warm/supervisor"
)

// spares returns the status rows of ready spares.
func spares(doc StatusDoc) []supervisor.ChildStatus {
	var out []supervisor.ChildStatus
	for _, c := range doc.Snapshot.Children {
		if c.State == supervisor.StateSpare {
			out = append(out, c)
		}
	}
	return out
}

// With --spares 1 the daemon keeps a real codex child started, with a thread open, before any
// message. The first message of a new chat runs on it (same pid, same thread: no spawn, no
// thread/start of its own), a replacement spare follows, a second chat gets that one, and every
// child, spares included, is gone after the daemon stops.
func TestE2ESpareServesNewChats(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true})
	d := e.start("--spares", "1")
	c := newLocalClient(t, d)
	var first supervisor.ChildStatus
	d.waitUntil("a spare", func() bool {
		sp := spares(d.status())
		if len(sp) == 1 {
			first = sp[0]
		}
		return len(sp) == 1
	})
	spare := procOf(t, first.PID)
	if first.ThreadID == "" || first.ChatKey != "" {
		t.Fatalf("spare row %+v: want a pre-started thread and no chat", first)
	}

	r := c.send("alpha", "hello")
	if r.Text != "reply #1: hello" || r.ThreadID != first.ThreadID {
		t.Fatalf("alpha's first reply %+v, want it on the spare's thread %s", r, first.ThreadID)
	}
	if pid := childPID(d.status(), "alpha"); pid != first.PID {
		t.Fatalf("alpha runs on pid %d, want the spare's %d", pid, first.PID)
	}
	var second supervisor.ChildStatus
	d.waitUntil("a replacement spare", func() bool {
		sp := spares(d.status())
		if len(sp) == 1 && sp[0].PID != first.PID {
			second = sp[0]
			return true
		}
		return false
	})
	replacement := procOf(t, second.PID)
	if r := c.send("beta", "hi"); r.ThreadID != second.ThreadID || r.ThreadID == first.ThreadID {
		t.Fatalf("beta's reply %+v, want the second spare's thread %s", r, second.ThreadID)
	}
	if r := c.send("alpha", "again"); r.Text != "reply #2: again" {
		t.Fatalf("alpha's second reply %+v", r)
	}
	d.waitUntil("a third spare", func() bool { return len(spares(d.status())) == 1 })
	third := procOf(t, spares(d.status())[0].PID)

	d.stop(stopTimeout)
	waitGone(t, stopTimeout, spare, replacement, third)
}
