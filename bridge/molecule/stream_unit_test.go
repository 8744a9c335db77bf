package molecule

import (
	"io"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/molecule/platform"
)

// Which events wake the poll: a message to us from someone else, a canvas user's message and a
// delegation's end; never our own writes (heartbeats, current_task, notifies, upload echoes,
// tool chips) nor a row written as ourselves.
func TestStreamEventWakes(t *testing.T) {
	self, peer := "ws-self", "ws-peer"
	ev := func(typ, activityType, method string, source *string) streamEvent {
		var e streamEvent
		e.Type, e.Data.ActivityType, e.Data.Method, e.Data.SourceID = typ, activityType, method, source
		return e
	}
	for _, tc := range []struct {
		name string
		ev   streamEvent
		want bool
	}{
		{"canvas message", ev(eventActivityLogged, "a2a_receive", "message/send", nil), true},
		{"peer message", ev(eventActivityLogged, "a2a_receive", "message/send", &peer), true},
		{"user message", ev(eventUserMessage, "", "", nil), true},
		{"delegation complete", ev(eventDelegationDone, "", "", nil), true},
		{"delegation failed", ev(eventDelegationFailed, "", "", nil), true},
		{"a row as ourselves", ev(eventActivityLogged, "a2a_receive", "message/send", &self), false},
		{"our upload's echo", ev(eventActivityLogged, "a2a_receive", methodUploadReceive, nil), false},
		{"our notify", ev("AGENT_MESSAGE", "", "", nil), false},
		{"our tool chip", ev(eventActivityLogged, "agent_log", "shell", &self), false},
		{"our heartbeat", ev(eventWorkspaceBeat, "", "", nil), false},
		{"our current_task", ev("TASK_UPDATED", "", "", nil), false},
		{"an a2a send", ev(eventActivityLogged, "a2a_send", "message/send", &self), false},
		{"unknown", ev("SOMETHING_NEW", "", "", nil), false},
	} {
		if got := tc.ev.wakes(self); got != tc.want {
			t.Errorf("%s: wakes = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The reader takes events as sse.go writes them, wakes on the ones that may mean a row, counts
// every type, and skips a line longer than platform.MaxEventBytes without holding it (waking: the poll
// reads the row properly).
func TestStreamRead(t *testing.T) {
	var wakes []pollCause
	st := &streamer{self: "ws-self", stats: newStreamStats(), announced: newAnnouncements(16), wake: func(c pollCause) { wakes = append(wakes, c) }}
	huge := `data: {"type":"ACTIVITY_LOGGED","data":{"request_body":"` + strings.Repeat("x", 2*platform.MaxEventBytes) + `"}}`
	body := ": ping\n\n" +
		`data: {"type":"WORKSPACE_HEARTBEAT","timestamp":"2026-11-28T08:00:00Z","data":{}}` + "\n\n" +
		`data: {"type":"ACTIVITY_LOGGED","timestamp":"2026-11-28T08:00:01Z","data":{"activity_type":"a2a_receive","method":"message/send","source_id":null}}` + "\n\n" +
		"data: {\"type\":\"USER_MESSAGE\",\r\ndata: \"data\":{}}\r\n\r\n" +
		huge + "\n\n" +
		"data: not json\n\n" +
		`data: {"type":"AGENT_MESSAGE","data":{}}` + "\n\n"
	lines := 0
	err := st.read(strings.NewReader(body), func() { lines++ })
	if err != io.EOF {
		t.Fatalf("read = %v, want EOF", err)
	}
	if len(wakes) != 4 {
		t.Errorf("%d wakes, want 4 (the canvas row, the two-line USER_MESSAGE, the oversized and the unreadable event)", len(wakes))
	}
	got := st.stats.eventCounts()
	for typ, n := range map[string]int64{"WORKSPACE_HEARTBEAT": 1, "ACTIVITY_LOGGED": 1, "USER_MESSAGE": 1, "oversized": 1, "unreadable": 1, "AGENT_MESSAGE": 1} {
		if got[typ] != n {
			t.Errorf("events %v: want %s %d", got, typ, n)
		}
	}
	if lines < 10 {
		t.Errorf("alive called %d times, want every line", lines)
	}
}

// A platform inventing event types cannot grow the counts without end.
func TestStreamEventTypesBounded(t *testing.T) {
	s := newStreamStats()
	for i := range 1000 {
		s.saw("TYPE_" + strings.Repeat("x", i%7) + string(rune('A'+i%26)) + string(rune('A'+i/26%26)))
	}
	if n := len(s.eventCounts()); n > maxEventTypes+1 {
		t.Fatalf("%d types counted, want at most %d", n, maxEventTypes+1)
	}
}

// One message brings three events naming its message_id: once a poll read the message, its
// events wake nothing, and a poll queued behind the one that read it is not needed; an event
// without an id, or one whose message is not read yet, always is.
func TestAnnouncements(t *testing.T) {
	a := newAnnouncements(16)
	if !a.announce("m1") {
		t.Fatal("the first event of an unread message did not wake")
	}
	a.began()
	if !a.announce("m1") || !a.needed() {
		t.Fatal("an event during the poll, of a message it has not read yet, must keep a poll queued")
	}
	a.readMessage("m1")
	if a.needed() {
		t.Fatal("a poll queued behind the one that read m1 still counted as needed")
	}
	if a.announce("m1") {
		t.Fatal("an event of a message already read woke a poll")
	}
	if !a.announce("") || !a.needed() {
		t.Fatal("an event without a message_id must wake a poll")
	}
	a.began()
	if a.needed() {
		t.Fatal("a poll that began covers what was announced before it")
	}
}
