package main

import (
	"errors"
	"math/rand/v2"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// The tests cover the soak's pure parts on synthetic inputs: the correlation of replies with
// messages, the acknowledgement and session checks, the tolerance, the schedule and the reading of
// the platform's call log. The soak itself needs the real codex and is run by `make soak`.

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	peerA  = "peer:peer-p1"
	peerB  = "peer:peer-p2"
	canvas = "canvas:" + workspaceID
)

// msgsFor makes n messages for a chat, with activity ids and seqs following start.
func msgsFor(label, chatKey string, n, start int) []Message {
	out := make([]Message, n)
	for i := range n {
		out[i] = Message{Label: label, ChatKey: chatKey, Index: i,
			ActivityID: "act-" + strconv.Itoa(start+i), Seq: int64(start + i)}
	}
	return out
}

// answer is the mock model's reply to message idx of label, with history count n.
func answer(label string, idx, n int) string {
	return "reply #" + strconv.Itoa(n) + ": " + messageText(label, idx)
}

const errInterrupted = "codex was interrupted before it finished (status interrupted); please send your message again."

func reply(order int, chat, text, msgID string) Reply {
	return Reply{Order: order, ChatKey: chat, Text: text, MessageID: msgID, At: t0.Add(time.Duration(order) * time.Second)}
}

func counts(a *Accounting) []int {
	out := make([]int, len(a.Results))
	for i, r := range a.Results {
		out[i] = len(r.Replies)
	}
	return out
}

func TestTokenRoundTrip(t *testing.T) {
	label, idx, ok := parseToken(answer("p12", 7, 3))
	if !ok || label != "p12" || idx != 7 {
		t.Fatalf("parseToken = %q %d %v", label, idx, ok)
	}
	if n, ok := parseHistory(answer("p12", 7, 3)); !ok || n != 3 {
		t.Fatalf("parseHistory = %d %v", n, ok)
	}
	if _, _, ok := parseToken(errInterrupted); ok {
		t.Fatal("an error reply must carry no token")
	}
	if _, ok := parseHistory("codex failed (status failed): reply #3: x"); ok {
		t.Fatal("history is only read from the start of a reply")
	}
}

func TestCorrelateExactlyOnce(t *testing.T) {
	msgs := append(msgsFor("p1", peerA, 3, 1), msgsFor("p2", peerB, 2, 4)...)
	replies := []Reply{
		reply(10, peerA, answer("p1", 0, 1), "a"),
		reply(11, peerB, answer("p2", 0, 1), "b"),
		reply(12, peerA, errInterrupted, "c"), // message p1-1: a visible error reply
		reply(13, peerA, answer("p1", 2, 3), "d"),
		reply(14, peerB, answer("p2", 1, 2), "e"),
	}
	a := Correlate(msgs, replies, nil)
	if got, want := counts(a), []int{1, 1, 1, 1, 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("replies per message = %v, want %v", got, want)
	}
	if a.Results[1].Replies[0].Order != 12 {
		t.Fatalf("error reply assigned to %+v, want message p1-1", a.Results[1])
	}
	if a.Duplicates() != 0 || len(a.Lost()) != 0 || len(a.Regressions) != 0 || len(a.Extra) != 0 {
		t.Fatalf("unexpected findings: dups %d lost %v regressions %v extra %v", a.Duplicates(), a.Lost(), a.Regressions, a.Extra)
	}
	if a.Answers[peerA] != 2 || a.Answers[peerB] != 2 {
		t.Fatalf("answers = %v", a.Answers)
	}
}

func TestCorrelateLost(t *testing.T) {
	msgs := msgsFor("p1", peerA, 3, 1)
	replies := []Reply{
		reply(10, peerA, answer("p1", 0, 1), "a"),
		reply(11, peerA, answer("p1", 2, 3), "b"), // p1-1 skipped
	}
	a := Correlate(msgs, replies, nil)
	lost := a.Lost()
	if len(lost) != 1 || lost[0].Index != 1 {
		t.Fatalf("lost = %+v, want p1-1", lost)
	}
	// The last message without any reply is lost too.
	a = Correlate(msgs, replies[:1], nil)
	if got := len(a.Lost()); got != 2 {
		t.Fatalf("lost = %d, want 2", got)
	}
}

func TestCorrelateAnsweredTwice(t *testing.T) {
	msgs := msgsFor("p1", peerA, 2, 1)
	replies := []Reply{
		reply(10, peerA, answer("p1", 0, 1), "a"),
		reply(11, peerA, answer("p1", 0, 2), "b"), // codex ran again: new text, new messageId
		reply(12, peerA, answer("p1", 1, 3), "c"),
	}
	a := Correlate(msgs, replies, nil)
	if d := a.Duplicated(); len(d) != 1 || d[0].Message.Index != 0 || len(d[0].Replies) != 2 {
		t.Fatalf("duplicated = %+v", d)
	}
	if a.Duplicates() != 1 || a.InWindow() != 0 {
		t.Fatalf("duplicates %d in window %d, want 1 and 0", a.Duplicates(), a.InWindow())
	}
}

func TestCorrelateRedeliveryInKillWindow(t *testing.T) {
	msgs := msgsFor("p1", peerA, 2, 1)
	first := reply(10, peerA, answer("p1", 0, 1), "mid-1")
	replies := []Reply{first,
		reply(20, peerA, first.Text, "mid-1"), // the stored reply, delivered again by the next daemon
		reply(21, peerA, answer("p1", 1, 2), "mid-2"),
	}
	kill := Kill{At: first.At.Add(3 * time.Millisecond), Boundary: 15, State: BridgeState{
		Pending: []PendingReply{{ActivityID: "act-1", ChatKey: peerA, Text: first.Text, MessageID: "mid-1"}}}}
	a := Correlate(msgs, replies, []Kill{kill})
	if got, want := counts(a), []int{1, 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("replies per message = %v, want %v", got, want)
	}
	if len(a.Redeliveries) != 1 {
		t.Fatalf("redeliveries = %+v", a.Redeliveries)
	}
	d := a.Redeliveries[0]
	if !d.InWindow || d.Kill != 0 || d.SinceAccept != 3*time.Millisecond {
		t.Fatalf("redelivery = %+v, want in window of kill 0, 3ms after the accept", d)
	}
	if a.Duplicates() != 1 || a.InWindow() != 1 {
		t.Fatalf("duplicates %d in window %d, want 1 and 1", a.Duplicates(), a.InWindow())
	}
}

func TestCorrelateRedeliveryOutsideKillWindow(t *testing.T) {
	msgs := msgsFor("p1", peerA, 1, 1)
	first := reply(10, peerA, answer("p1", 0, 1), "mid-1")
	again := reply(20, peerA, first.Text, "mid-1")

	// A kill in between whose state had the reply delivered already: not excused.
	kill := Kill{At: first.At.Add(5 * time.Second), Boundary: 15, State: BridgeState{Done: []string{"act-1"}}}
	a := Correlate(msgs, []Reply{first, again}, []Kill{kill})
	if len(a.Redeliveries) != 1 || a.Redeliveries[0].InWindow || a.Redeliveries[0].Kill != 0 {
		t.Fatalf("redeliveries = %+v, want one outside the window of kill 0", a.Redeliveries)
	}
	// No kill at all between the two.
	late := Kill{Boundary: 25, State: BridgeState{Pending: []PendingReply{{ChatKey: peerA, Text: first.Text, MessageID: "mid-1"}}}}
	a = Correlate(msgs, []Reply{first, again}, []Kill{late})
	if len(a.Redeliveries) != 1 || a.Redeliveries[0].InWindow || a.Redeliveries[0].Kill != -1 {
		t.Fatalf("redeliveries = %+v, want one without a kill", a.Redeliveries)
	}
	if a.InWindow() != 0 || a.Duplicates() != 1 {
		t.Fatalf("duplicates %d in window %d", a.Duplicates(), a.InWindow())
	}
}

func TestCorrelateCanvasEqualTexts(t *testing.T) {
	msgs := msgsFor("c0", canvas, 3, 1)
	replies := []Reply{
		reply(10, canvas, answer("c0", 0, 1), ""),
		reply(11, canvas, errInterrupted, ""),
		reply(12, canvas, errInterrupted, ""), // a second interrupted turn, not a re-delivery
	}
	a := Correlate(msgs, replies, nil)
	if got, want := counts(a), []int{1, 1, 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("replies per message = %v, want %v", got, want)
	}
	if len(a.Redeliveries) != 0 {
		t.Fatalf("redeliveries = %+v, want none", a.Redeliveries)
	}

	// The same texts around a kill that left exactly that reply pending: a re-delivery.
	kill := Kill{Boundary: 12, State: BridgeState{Pending: []PendingReply{{ActivityID: "act-2", ChatKey: canvas, Text: errInterrupted}}}}
	replies = append(replies, reply(13, canvas, errInterrupted, ""))
	a = Correlate(msgs, replies, []Kill{kill})
	if len(a.Redeliveries) != 1 || !a.Redeliveries[0].InWindow || a.Redeliveries[0].Reply.Order != 12 {
		t.Fatalf("redeliveries = %+v, want call 12 in the window", a.Redeliveries)
	}
	if got, want := counts(a), []int{1, 1, 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("replies per message = %v, want %v", got, want)
	}
}

func TestCorrelateCanvasPendingOfNextMessage(t *testing.T) {
	// c0-1 was interrupted and delivered; the daemon was killed while c0-2's reply, which reads
	// the same, was pending. Its delivery by the next daemon is c0-2's first reply, not a
	// re-delivery of c0-1's.
	msgs := msgsFor("c0", canvas, 3, 1)
	replies := []Reply{
		reply(10, canvas, answer("c0", 0, 1), ""),
		reply(11, canvas, errInterrupted, ""),
		reply(20, canvas, errInterrupted, ""),
	}
	kill := Kill{Boundary: 15, State: BridgeState{Pending: []PendingReply{{ActivityID: "act-3", ChatKey: canvas, Text: errInterrupted}}}}
	a := Correlate(msgs, replies, []Kill{kill})
	if len(a.Redeliveries) != 0 {
		t.Fatalf("redeliveries = %+v, want none", a.Redeliveries)
	}
	if got, want := counts(a), []int{1, 1, 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("replies per message = %v, want %v", got, want)
	}
}

func TestCorrelateExtraAndMisrouted(t *testing.T) {
	msgs := append(msgsFor("p1", peerA, 1, 1), msgsFor("p2", peerB, 1, 2)...)
	replies := []Reply{
		reply(10, peerA, answer("p1", 0, 1), "a"),
		reply(11, peerA, errInterrupted, "b"),                    // more replies than messages
		reply(12, peerA, answer("p2", 0, 1), "c"),                // p2's answer sent to p1
		reply(13, peerB, answer("p9", 4, 1), "d"),                // a token nobody sent
		reply(14, peerB, "codex failed (status failed): x", "e"), // p2-0's error reply
	}
	a := Correlate(msgs, replies, nil)
	if len(a.Extra) != 2 || a.Extra[0].Order != 11 || a.Extra[1].Order != 13 {
		t.Fatalf("extra = %+v, want calls 11 and 13", a.Extra)
	}
	if len(a.Misrouted) != 1 || a.Misrouted[0].Order != 12 {
		t.Fatalf("misrouted = %+v, want call 12", a.Misrouted)
	}
	if got, want := counts(a), []int{1, 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("replies per message = %v, want %v", got, want)
	}
}

func TestCorrelateHistoryRegression(t *testing.T) {
	msgs := msgsFor("p1", peerA, 4, 1)
	replies := []Reply{
		reply(10, peerA, answer("p1", 0, 1), "a"),
		reply(11, peerA, answer("p1", 1, 2), "b"),
		reply(12, peerA, errInterrupted, "c"),
		reply(13, peerA, answer("p1", 3, 1), "d"), // a new thread: the conversation was lost
	}
	a := Correlate(msgs, replies, nil)
	if len(a.Regressions) != 1 || a.Regressions[0].Prev != 2 || a.Regressions[0].Next != 1 {
		t.Fatalf("regressions = %+v", a.Regressions)
	}
	// Growing history, also with gaps (a re-run message counts twice), is fine.
	replies[3] = reply(13, peerA, answer("p1", 3, 5), "d")
	if a := Correlate(msgs, replies, nil); len(a.Regressions) != 0 {
		t.Fatalf("regressions = %+v, want none", a.Regressions)
	}
}

func TestAckViolations(t *testing.T) {
	msgs := msgsFor("p1", peerA, 3, 1) // act-1..3, seq 1..3
	replies := []Reply{
		reply(10, peerA, answer("p1", 0, 1), "a"),
		reply(20, peerA, answer("p1", 1, 2), "b"),
	}
	a := Correlate(msgs, replies, nil)

	good := AckViolations(a, []Ack{{Order: 11, Seq: 1}, {Order: 21, Seq: 2}}, []Kill{
		{Boundary: 15, State: BridgeState{Cursor: "act-1", AckedSeq: 1}},
		{Boundary: 25, State: BridgeState{Cursor: "act-1", Done: []string{"act-2"}}},
	}, &BridgeState{Cursor: "act-2"}, 30)
	if len(good) != 0 {
		t.Fatalf("violations = %v, want none", good)
	}

	cases := []struct {
		name  string
		acks  []Ack
		kills []Kill
		final *BridgeState
		want  string // activity ids in violation order
	}{
		{"platform ack before the reply", []Ack{{Order: 15, Seq: 2}}, nil, nil, "act-2"},
		{"platform ack of a message never answered", []Ack{{Order: 25, Seq: 3}}, nil, nil, "act-3"},
		{"cursor past a reply of a later daemon", nil, []Kill{{Boundary: 15, State: BridgeState{Cursor: "act-2"}}}, nil, "act-2"},
		{"acked_seq left by a kill", nil, []Kill{{Boundary: 15, State: BridgeState{AckedSeq: 2}}}, nil, "act-2"},
		{"done list left by a kill", nil, []Kill{{Boundary: 12, State: BridgeState{Done: []string{"act-2"}}}}, nil, "act-2"},
		{"final state finished an unanswered message", nil, nil, &BridgeState{Cursor: "act-3"}, "act-3"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := AckViolations(a, c.acks, c.kills, c.final, 30)
			var ids []string
			for _, x := range v {
				ids = append(ids, x.Message.ActivityID)
			}
			if got := strings.Join(ids, ","); got != c.want {
				t.Fatalf("violations = %v, want %s", v, c.want)
			}
		})
	}
}

func TestUnfinishedAndSessions(t *testing.T) {
	msgs := msgsFor("p1", peerA, 3, 1)
	a := Correlate(msgs, nil, nil)
	left, pending := Unfinished(a, BridgeState{Cursor: "act-1", Done: []string{"act-3"}, Pending: []PendingReply{{}}})
	if len(left) != 1 || left[0].ActivityID != "act-2" || pending != 1 {
		t.Fatalf("unfinished = %v, pending %d", left, pending)
	}

	snaps := []map[string]string{{peerA: "t1"}, {peerA: "t1", peerB: "t2"}, {peerA: "t3", peerB: "t2"}}
	if got := ThreadChanges(snaps); len(got) != 1 || !strings.HasPrefix(got[0], peerA) {
		t.Fatalf("thread changes = %v", got)
	}
	if got := ThreadChanges(snaps[:2]); len(got) != 0 {
		t.Fatalf("thread changes = %v, want none", got)
	}
	if got := MissingSessions(map[string]int{peerA: 2, peerB: 1, canvas: 0}, map[string]string{peerA: "t1"}); !reflect.DeepEqual(got, []string{peerB}) {
		t.Fatalf("missing sessions = %v", got)
	}
}

func TestTolerance(t *testing.T) {
	tol := defaultTolerance()
	base := Sample{Goroutines: 10, HeapBytes: 3 << 20, RSSBytes: 13 << 20}
	for _, c := range []struct {
		name string
		end  Sample
		ok   bool
	}{
		{"same", base, true},
		{"within", Sample{Goroutines: 15, HeapBytes: 19 << 20, RSSBytes: 77 << 20}, true},
		{"goroutine leak", Sample{Goroutines: 16, HeapBytes: 3 << 20, RSSBytes: 13 << 20}, false},
		{"heap leak", Sample{Goroutines: 10, HeapBytes: 20 << 20, RSSBytes: 13 << 20}, false},
		{"rss leak", Sample{Goroutines: 10, HeapBytes: 3 << 20, RSSBytes: 78 << 20}, false},
	} {
		if ok, why := tol.Within(base, c.end); ok != c.ok {
			t.Errorf("%s: Within = %v (%v), want %v", c.name, ok, why, c.ok)
		}
	}
	// A large baseline gets the factor, not the slack.
	big := Sample{Goroutines: 10, HeapBytes: 100 << 20, RSSBytes: 100 << 20}
	if ok, why := tol.Within(big, Sample{Goroutines: 10, HeapBytes: 190 << 20, RSSBytes: 190 << 20}); !ok {
		t.Errorf("2× a large baseline rejected: %v", why)
	}
}

func TestPlan(t *testing.T) {
	cfg := planConfig{Duration: 100 * time.Second, DaemonKills: 3, ChildKills: 5, PlatformHangs: 2, CursorGone: 1, FlakyEpisodes: 2}
	a := plan(cfg, rand.New(rand.NewPCG(7, 1)))
	b := plan(cfg, rand.New(rand.NewPCG(7, 1)))
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed gave different schedules")
	}
	if c := plan(cfg, rand.New(rand.NewPCG(8, 1))); reflect.DeepEqual(a, c) {
		t.Fatal("different seeds gave the same schedule")
	}
	n := map[eventKind]int{}
	for i, e := range a {
		n[e.Kind]++
		if e.At < 0 || e.At > cfg.Duration {
			t.Errorf("event %v outside the phase", e)
		}
		if i > 0 && e.At < a[i-1].At {
			t.Errorf("events not sorted: %v before %v", a[i-1], e)
		}
		if e.Kind == evDaemonKill && (e.At < 10*time.Second || e.At > 80*time.Second) {
			t.Errorf("daemon kill %v outside 10%%-80%% of the phase", e)
		}
		if e.Kind == evPlatformHang && e.Route == "" {
			t.Errorf("hang %v without a route", e)
		}
	}
	want := map[eventKind]int{evDaemonKill: 3, evChildKill: 5, evPlatformHang: 2, evCursorGone: 1, evFlakyStart: 2, evFlakyStop: 2}
	if !reflect.DeepEqual(n, want) {
		t.Fatalf("event counts = %v, want %v", n, want)
	}
}

func TestReadCalls(t *testing.T) {
	calls := []moleculetest.Call{
		{Route: moleculetest.RouteRegister, Status: 200},
		{Route: moleculetest.RouteActivity, Status: http.StatusBadGateway},
		{Route: moleculetest.RouteActivity, Status: http.StatusGone},
		{Route: moleculetest.RouteNotify, Status: 200, Body: []byte(`{"message":"hello"}`), At: t0},
		{Route: moleculetest.RouteA2A, Status: moleculetest.StatusHung, Path: "/workspaces/peer-p1/a2a"},
		{Route: moleculetest.RouteA2A, Status: 200, Path: "/workspaces/peer-p1/a2a",
			Body: []byte(`{"jsonrpc":"2.0","id":"x","method":"message/send","params":{"message":{"role":"user","messageId":"m1","parts":[{"kind":"text","text":"a"},{"kind":"text","text":"b"}]}}}`)},
		{Route: moleculetest.RouteNotify, Status: http.StatusBadGateway, Body: []byte(`{"message":"not accepted"}`)},
		{Route: moleculetest.RouteAck, Status: 200, Body: []byte(`{"acked_seq":4}`)},
	}
	l := readCalls(calls, workspaceID)
	want := []Reply{
		{Order: 3, ChatKey: canvas, Text: "hello", At: t0},
		{Order: 5, ChatKey: peerA, Text: "a\nb", MessageID: "m1"},
	}
	if !reflect.DeepEqual(l.Replies, want) {
		t.Fatalf("replies = %+v, want %+v", l.Replies, want)
	}
	if !reflect.DeepEqual(l.Acks, []Ack{{Order: 7, Seq: 4}}) {
		t.Fatalf("acks = %+v", l.Acks)
	}
	if l.Failures != 3 || l.Hangs != 1 || l.Gone != 1 {
		t.Fatalf("failures %d hangs %d gone %d, want 3 1 1", l.Failures, l.Hangs, l.Gone)
	}
}

func TestVerdict(t *testing.T) {
	msgs := msgsFor("p1", peerA, 2, 1)
	replies := []Reply{reply(10, peerA, answer("p1", 0, 1), "a"), reply(11, peerA, answer("p1", 1, 2), "b")}
	good := func() *outcome {
		return &outcome{msgs: msgs, acct: Correlate(msgs, replies, nil), log: callLog{Replies: replies},
			base: Sample{Goroutines: 10, HeapBytes: 1 << 20, RSSBytes: 10 << 20}, baseOK: true,
			end: Sample{Goroutines: 11, HeapBytes: 2 << 20, RSSBytes: 12 << 20}, endOK: true, daemonStarts: 1}
	}
	if cs := verdict(good()); !passed(cs) {
		t.Fatalf("a clean outcome failed: %+v", cs)
	}
	for name, spoil := range map[string]func(o *outcome){
		"lost":          func(o *outcome) { o.acct = Correlate(msgs, replies[:1], nil) },
		"leftover":      func(o *outcome) { o.leftovers = []proc{{PID: 42, Cmd: "codex app-server"}} },
		"ack violation": func(o *outcome) { o.ackViol = []AckViolation{{Message: msgs[0]}} },
		"goroutines":    func(o *outcome) { o.end.Goroutines = 40 },
		"no baseline":   func(o *outcome) { o.baseOK = false },
		"crash":         func(o *outcome) { o.unexpected = []string{"daemon #1 exited by itself"} },
		"thread":        func(o *outcome) { o.threadChanges = []string{"peer:x: a → b"} },
		"fatal":         func(o *outcome) { o.fatal = errors.New("daemon did not start") },
	} {
		o := good()
		spoil(o)
		if passed(verdict(o)) {
			t.Errorf("%s: verdict passed", name)
		}
	}
}

func TestModelFaults(t *testing.T) {
	req := func(label string, idx int) mockmodel.Request {
		text := messageText(label, idx)
		return mockmodel.Request{UserTexts: []string{text}, LastUserText: text}
	}
	draw := func(f *modelFaults) []string {
		var out []string
		for i := range 200 {
			r := f.Script(req("p1", i))
			switch {
			case r.Hang:
				out = append(out, "hang")
			case r.Status != 0:
				out = append(out, "fail")
			default:
				if r.Text != "reply #1: "+messageText("p1", i) {
					t.Fatalf("healthy reply = %q", r.Text)
				}
				out = append(out, "ok")
			}
		}
		return out
	}
	f := newModelFaults(9, 0.2, 0.2)
	if got := draw(f); slices.Contains(got, "hang") || slices.Contains(got, "fail") {
		t.Fatal("faults while not armed")
	}
	a, b := newModelFaults(9, 0.2, 0.2), newModelFaults(9, 0.2, 0.2)
	a.armed.Store(true)
	b.armed.Store(true)
	da, db := draw(a), draw(b)
	if !reflect.DeepEqual(da, db) {
		t.Fatal("the same seed drew different faults")
	}
	hangs, fails := a.counts()
	if hangs < 20 || fails < 20 || hangs+fails > 120 {
		t.Fatalf("hangs %d fails %d of 200 at 20%% each", hangs, fails)
	}
	// A retried message draws again instead of repeating its fault forever.
	c := newModelFaults(9, 0.5, 0)
	c.armed.Store(true)
	hung := 0
	for range 20 {
		if c.Script(req("p2", 0)).Hang {
			hung++
		}
	}
	if hung == 0 || hung == 20 {
		t.Fatalf("20 attempts of one message hung %d times", hung)
	}
}

func TestInjectionOrder(t *testing.T) {
	chats := chatsFor(4, true)
	if chats[0].ChatKey != canvas || chats[1].ChatKey != peerA || chats[1].Peer != "peer-p1" {
		t.Fatalf("chats = %+v", chats)
	}
	order := injectionOrder(chats, 5, rand.New(rand.NewPCG(1, 2)))
	n := map[string]int{}
	for _, c := range order {
		n[c.ChatKey]++
	}
	if len(order) != 20 || len(n) != 4 || n[canvas] != 5 {
		t.Fatalf("order has %d messages over %v", len(order), n)
	}
}
