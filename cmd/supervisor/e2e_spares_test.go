package main

import (
	"fmt"
	"strings"
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
		// A new thread: in a new child, or, shared (make test-shared), in the same one.
		if len(sp) == 1 && sp[0].ThreadID != first.ThreadID {
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

// A spare is started for no chat, so its codex client logs without a chat key; once a chat
// takes it, every later line of that child names the chat (once: not an empty chat_key and the
// chat's), down to the line saying it closed.
func TestE2ESpareLogsCarryTheChatKeyOnceTaken(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true})
	d := e.start("--spares", "1")
	c := newLocalClient(t, d)
	var spare supervisor.ChildStatus
	d.waitUntil("a spare", func() bool {
		sp := spares(d.status())
		if len(sp) == 1 {
			spare = sp[0]
		}
		return len(sp) == 1
	})
	if r := c.send("alpha", "hello"); r.ThreadID != spare.ThreadID {
		t.Fatalf("alpha's reply %+v, want it on the spare's thread %s", r, spare.ThreadID)
	}
	var key string
	for _, row := range d.status().Snapshot.Children {
		if row.PID == spare.PID {
			key = row.ChatKey
		}
	}
	if key == "" {
		t.Fatalf("no chat on the spare's pid %d", spare.PID)
	}
	d.stop(stopTimeout)

	if testThreadsPerChild() != "" {
		// A shared child serves several chats: its own lines name none, and the pool's line
		// for the chat's thread leaving it names the chat, once.
		var retired []string
		for _, l := range strings.Split(d.log(), "\n") {
			if strings.Contains(l, `"codex child retired"`) && strings.Contains(l, `"chat_key":"`+key+`"`) {
				retired = append(retired, l)
			}
		}
		if len(retired) != 1 || strings.Count(retired[0], `"chat_key"`) != 1 {
			t.Errorf("chat %s's thread leaving the shared child: %q, want one line naming it once", key, retired)
		}
		return
	}
	pid := fmt.Sprintf(`"pid":%d`, spare.PID)
	var closed []string
	for _, l := range strings.Split(d.log(), "\n") {
		if strings.Contains(l, pid) && strings.Contains(l, `"codex app-server closed"`) {
			closed = append(closed, l)
		}
	}
	if len(closed) != 1 {
		t.Fatalf("%d 'codex app-server closed' lines for pid %d, want 1:\n%s", len(closed), spare.PID, d.logTail(40))
	}
	if l := closed[0]; strings.Count(l, `"chat_key"`) != 1 || !strings.Contains(l, `"chat_key":"`+key+`"`) {
		t.Errorf("the taken spare's last line does not name its chat %s once:\n%s", key, l)
	}
}
