//go:build linux

package main

// Real time on Molecule (issue 38): with the platform's event stream a canvas message is polled
// for when the platform announces it, not at the next poll. These tests run the daemon with
// production's intervals (--poll-interval 5s, --safety-poll-interval 30s), never the suite's
// fast polling, and assert through the polls-by-cause counters that the answers came from event
// wake-ups: a poll at the interval would take seconds, and none may have run.

import (
	"fmt"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/molecule"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// realtimeArgs are production's poll intervals.
var realtimeArgs = []string{"--poll-interval", "5s", "--safety-poll-interval", "30s"}

// waitStream waits until d's event stream is connected and its catch-up poll ran, and returns
// the stats then.
func waitStream(d *daemonProc) molecule.Stats {
	d.e.t.Helper()
	var s molecule.Stats
	d.waitUntil("the event stream connected and its catch-up poll ran", func() bool {
		s = d.bridgeStats()
		return s.Stream.State == molecule.StreamConnected && s.Polls["catch_up"] >= 1
	})
	return s
}

// sendCanvas enqueues a canvas message and waits for the want-th reply.
func (e *e2e) sendCanvas(d *daemonProc, text string, want int) {
	e.t.Helper()
	e.plat.Enqueue(moleculetest.CanvasMessage(text))
	d.waitPlatform(fmt.Sprintf("reply %d (%q)", want, text), func() bool { return len(e.plat.Notifies()) >= want })
}

// Every message is answered after an event woke the poll: no poll ran at the interval or as
// the safety poll, and each message cost at least one event poll.
func TestE2ERealtimeAnswersOnEvents(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{})
	d := e.start(realtimeArgs...)
	before := waitStream(d)
	const msgs = 5
	for i := range msgs {
		e.sendCanvas(d, fmt.Sprintf("message %d", i+1), i+1)
	}
	s := d.bridgeStats()
	if got := s.Polls["event"] - before.Polls["event"]; got < msgs {
		t.Errorf("%d event polls for %d messages: %+v", got, msgs, s.Polls)
	}
	if s.Polls["interval"] != 0 {
		t.Errorf("%d polls at --poll-interval with the stream up: %+v", s.Polls["interval"], s.Polls)
	}
	if n := s.Polls["safety"]; n > 1 {
		// The test runs far under 30 s; one safety poll at most on a very slow machine.
		t.Errorf("%d safety polls", n)
	}
	if s.Stream.Events["USER_MESSAGE"] < msgs || s.Stream.Events["ACTIVITY_LOGGED"] < msgs {
		t.Errorf("events seen %+v, want the messages' USER_MESSAGE and ACTIVITY_LOGGED", s.Stream.Events)
	}
	for i := range msgs {
		if n := e.countReplies(fmt.Sprintf("reply #%d: message %d", i+1, i+1)); n != 1 {
			t.Errorf("message %d answered %d times: %q", i+1, n, e.notifyTexts())
		}
	}
	d.stop(stopTimeout)
}

// Our own writes come back on the stream (heartbeats, current_task, the reply's notify, the tool
// chip) and never cost a poll.
func TestE2ERealtimeOwnWritesDoNotPoll(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{})
	d := e.start(append(realtimeArgs, "--heartbeat-interval", "100ms")...)
	waitStream(d)
	e.sendCanvas(d, mockmodel.KeywordShell+" run it", 1)
	d.waitUntil("the tool chip", func() bool { return len(e.plat.AgentLogs()) >= 1 })
	after := d.bridgeStats()
	// Heartbeats every 100 ms, each announced on the stream: wait for many of them.
	beats := after.Stream.Events["WORKSPACE_HEARTBEAT"]
	d.waitUntil("ten more heartbeats seen on the stream", func() bool {
		return d.bridgeStats().Stream.Events["WORKSPACE_HEARTBEAT"] >= beats+10
	})
	s := d.bridgeStats()
	if s.Polls["event"] != after.Polls["event"] || s.Stream.Wakeups != after.Stream.Wakeups {
		t.Errorf("our own writes woke the poll: event polls %d → %d, wake-ups %d → %d (events %+v)",
			after.Polls["event"], s.Polls["event"], after.Stream.Wakeups, s.Stream.Wakeups, s.Stream.Events)
	}
	if s.Stream.Events["AGENT_MESSAGE"] < 1 {
		t.Errorf("the reply's notify was not seen on the stream: %+v", s.Stream.Events)
	}
	if s.Chips.Sent < 1 {
		t.Errorf("no tool chip sent: %+v", s.Chips)
	}
	d.stop(stopTimeout)
}

// An event while the workspace is paused starts no turn: the message is answered once the
// workspace is resumed.
func TestE2ERealtimePausedWorkspaceAnswersAfterResume(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{})
	d := e.start(append(realtimeArgs, "--heartbeat-interval", "100ms")...)
	waitStream(d)
	e.sendCanvas(d, "before the pause", 1)
	e.plat.Pause()
	// The state check after the next one saw the pause (the next may have been on its way).
	checks := e.plat.CountCalls(moleculetest.RouteState, 0)
	d.waitPlatform("two more state checks", func() bool { return e.plat.CountCalls(moleculetest.RouteState, 0) >= checks+2 })
	before := d.bridgeStats().Stream
	e.plat.Enqueue(moleculetest.CanvasMessage("during the pause"))
	// The message's event, or, when a loaded machine let the stream fall silent for three
	// 100 ms heartbeats and it connected again meanwhile, the connect that would catch it up.
	d.waitUntil("the message's event", func() bool {
		s := d.bridgeStats().Stream
		return s.Wakeups > before.Wakeups || s.Connects > before.Connects
	})
	beats := len(e.plat.Heartbeats())
	d.waitPlatform("three more heartbeats", func() bool { return len(e.plat.Heartbeats()) >= beats+3 })
	if s := d.bridgeStats(); s.Received != 1 || len(e.plat.Notifies()) != 1 {
		t.Fatalf("a message was taken while paused: received %d, replies %q", s.Received, e.notifyTexts())
	}
	e.plat.Resume()
	d.waitPlatform("the reply after the resume", func() bool { return e.countReplies("reply #2: during the pause") == 1 })
	d.stop(stopTimeout)
}

// A reload subscribes again: the new image connects, runs its catch-up poll and answers the
// next message on an event.
func TestE2ERealtimeAcrossReload(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{})
	installReloadable(t, e)
	d := e.start(realtimeArgs...)
	waitStream(d)
	e.sendCanvas(d, "before the reload", 1)
	installBin(t, e.bin)
	if code, out := e.reloadCmd(); code != 0 {
		t.Fatalf("reload: exit %d: %s", code, out)
	}
	if doc := d.status(); doc.Daemon.Reloads != 1 {
		t.Fatalf("reloads %d, want 1", doc.Daemon.Reloads)
	}
	before := waitStream(d)
	e.sendCanvas(d, "after the reload", 2)
	s := d.bridgeStats()
	if s.Polls["event"] <= before.Polls["event"] || s.Polls["interval"] != 0 {
		t.Errorf("after the reload the message was not polled for on an event: %+v → %+v", before.Polls, s.Polls)
	}
	d.stop(stopTimeout)
}
