//go:build linux

package main

// A model service that cannot be reached: codex retries it forever, so the daemon bounds the
// wait, tells the chat why, and recovers by itself when the service is back.

import (
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// modelAddr is host:port of the e2e's mock model, for starting one again on the same address.
func (e *e2e) modelAddr() string {
	return strings.TrimSuffix(strings.TrimPrefix(e.mock.URL(), "http://"), "/v1")
}

// takeModelAway closes the mock model and keeps its port: a socket bound to it but not
// listening refuses every connection (as a service that is down does), and no other server of
// the test run can be given the port meanwhile. Without it, another test's server once took the
// freed port and answered codex ("ok"), so the model was "back" before the test restarted it.
// It returns the address for restartModel.
func (e *e2e) takeModelAway() string {
	e.t.Helper()
	addr := e.modelAddr()
	if err := e.mock.Close(); err != nil {
		e.t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		e.t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	ip := net.ParseIP(host).To4()
	if err != nil || ip == nil {
		e.t.Fatalf("model address %q: want an IPv4 host:port", addr)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	// SO_REUSEADDR: the closed server's connections may linger in TIME_WAIT on the port. A bound
	// socket still keeps the kernel from handing the port to a listener asking for any port.
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		e.t.Fatal(err)
	}
	sa := &syscall.SockaddrInet4{Port: p}
	copy(sa.Addr[:], ip)
	if err := syscall.Bind(fd, sa); err != nil {
		_ = syscall.Close(fd)
		e.t.Fatalf("hold the model's port %s: %v", addr, err)
	}
	e.modelHold = func() { _ = syscall.Close(fd) }
	e.t.Cleanup(func() {
		if e.modelHold != nil {
			e.modelHold()
		}
	})
	return addr
}

// restartModel starts a mock model on the address codex is configured with (the first one was
// taken away): the service is back.
func (e *e2e) restartModel(addr string) *mockmodel.Model {
	e.t.Helper()
	if e.modelHold != nil {
		e.modelHold()
		e.modelHold = nil
	}
	m, err := mockmodel.New(mockmodel.Config{Addr: addr})
	if err != nil {
		e.t.Fatalf("start the mock model again on %s: %v", addr, err)
	}
	e.t.Cleanup(func() { _ = m.Close() })
	return m
}

// The model is unreachable from the start: the message is answered within the bound with the
// cause (503, Retry-After), not after the 10-minute turn deadline with a reply blaming the user;
// status, readiness and the log say so once; the outage's next message is answered at codex's
// first report; and once the service is back the next message gets its answer and readiness
// recovers, without a restart.
func TestE2EModelUnreachableAtStartAndBack(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true})
	addr := e.takeModelAway()
	d := e.start("--turn-timeout", "10m", "--model-unreachable-timeout", "3s")
	c := newLocalClient(t, d)

	code, body, hdr := c.post("a", `{"text": "hello"}`)
	if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" ||
		!strings.Contains(string(body), "the model service could not be reached (Connection failed") {
		t.Fatalf("message while the model is away: HTTP %d (Retry-After %q) %s", code, hdr.Get("Retry-After"), body)
	}
	if strings.Contains(string(body), "smaller step") || strings.Contains(string(body), "time limit") {
		t.Errorf("the reply blames the message: %s", body)
	}
	m := d.status().Snapshot.Model
	if !m.Unreachable || m.Outages != 1 || !strings.Contains(m.Cause, "Connection failed") {
		t.Errorf("status model = %+v, want unreachable with the cause", m)
	}
	if code, reason := getReady(t, d); code == http.StatusOK || !strings.Contains(reason, "model") {
		t.Errorf("readyz while the model is away: %d %s", code, reason)
	}
	_, out := runStatus(t, "--state-dir", e.stateDir)
	if !strings.Contains(out, "WARNING: the model service cannot be reached") {
		t.Errorf("status table lacks the model warning:\n%s", out)
	}

	// The outage is known: the next message ends at codex's first report.
	code, body, _ = c.post("b", `{"text": "again"}`)
	if code != http.StatusServiceUnavailable {
		t.Fatalf("second message: HTTP %d %s", code, body)
	}
	var bound []string
	for _, l := range d.logsWith("turn ended by watchdog") {
		bound = append(bound, l.str("error"))
	}
	if len(bound) != 2 || !strings.Contains(bound[0], "tripped after 3s") || !strings.Contains(bound[1], "tripped after 0s") {
		t.Errorf("watchdog log lines = %q, want the bound, then at once", bound)
	}
	if w := d.logsWith("the model cannot be reached"); len(w) != 1 || w[0].str("level") != "warn" {
		t.Errorf("outage warnings = %d, want one per outage", len(w))
	}

	// The service comes back.
	back := e.restartModel(addr)
	if r := c.send("a", "are you there"); r.Status != "completed" || !strings.Contains(r.Text, "are you there") {
		t.Fatalf("after the model came back: %+v", r)
	}
	if back.RequestCount() == 0 {
		t.Error("the answer did not come from the model that came back")
	}
	// codex reaches the model on its websocket (the transport production uses) and comes back on
	// it: an outage does not leave the child on HTTP.
	if reqs := back.Requests(); back.Websockets() == 0 || !reqs[len(reqs)-1].Websocket {
		t.Errorf("the answer after the outage came over HTTP (%d websockets), want the websocket", back.Websockets())
	}
	if m := d.status().Snapshot.Model; m.Unreachable || m.Outages != 1 {
		t.Errorf("status model after recovery = %+v", m)
	}
	if code, reason := getReady(t, d); code != http.StatusOK {
		t.Errorf("readyz after recovery: %d %s", code, reason)
	}
	if l := d.logsWith("the model can be reached again"); len(l) != 1 {
		t.Errorf("recovery log lines = %d, want 1", len(l))
	}
	d.stop(stopTimeout)
}

// Mid-conversation on Molecule: the service goes away after an answer. The next message's row
// stays unacknowledged, the chat is told once that it will be answered when the service is
// back, and it is answered, exactly once, when it is; the chat's thread goes on.
func TestE2EModelUnreachableMidConversationMolecule(t *testing.T) {
	t.Parallel()
	// queue: the inbox submits and waits; steer hands the message over to the supervisor's queue
	// (the handOff path), which must park it the same way.
	for _, busy := range []string{"queue", "steer"} {
		t.Run(busy, func(t *testing.T) {
			t.Parallel()
			modelUnreachableMidConversation(t, busy)
		})
	}
}

func modelUnreachableMidConversation(t *testing.T, busy string) {
	e := newE2E(t, e2eConfig{Platform: moleculetest.Config{AckEnabled: true}})
	d := e.start("--model-unreachable-timeout", "2s", "--busy", busy)
	e.plat.Enqueue(moleculetest.CanvasMessage("first").WithSeq(1))
	d.waitPlatform("the first answer", func() bool { return len(e.plat.Notifies()) == 1 })
	addr := e.takeModelAway()

	const seq = 2
	id := e.plat.Enqueue(moleculetest.CanvasMessage("second").WithSeq(seq))[0]
	d.waitPlatform("the unreachable notice", func() bool { return len(e.plat.Notifies()) == 2 })
	notice := e.plat.Notifies()[1].Message
	if !strings.Contains(notice, "could not be reached") || !strings.Contains(notice, "answered when the service is back") {
		t.Errorf("notice = %q", notice)
	}
	d.waitUntil("a second try of the message", func() bool { return d.bridgeStats().UnreachableRetries >= 2 })
	if st := e.bridgeState(); st.Cursor == id || slices.Contains(st.Done, id) {
		t.Errorf("the row was passed while the model was away: %+v", st)
	}
	if acks := e.plat.Acks(); slices.Contains(acks, int64(seq)) {
		t.Errorf("mailbox acked the message before it was answered: %v", acks)
	}
	if n := len(e.plat.Notifies()); n != 2 {
		t.Errorf("%d notifies while the model is away, want the answer to one message and one notice", n)
	}

	back := e.restartModel(addr)
	d.waitPlatform("the answer after the service came back", func() bool { return len(e.plat.Notifies()) == 3 })
	d.waitPlatform("the mailbox ack", func() bool { return slices.Contains(e.plat.Acks(), int64(seq)) })
	d.waitPolls(3)
	notes := e.plat.Notifies()
	if len(notes) != 3 || !strings.Contains(notes[2].Message, "second") {
		t.Fatalf("notifies = %v, want the answer to the second message last", notes)
	}
	reqs := back.Requests()
	if back.Websockets() == 0 || len(reqs) == 0 || !reqs[0].Websocket {
		t.Errorf("the answer after the outage came over HTTP (%d websockets), want the websocket", back.Websockets())
	}
	if len(reqs) != 1 || !slices.Equal(reqs[0].UserTexts, []string{"first", "second"}) {
		t.Errorf("the model that came back saw %d requests (user texts %q), want one with the whole conversation", len(reqs), reqs[len(reqs)-1].UserTexts)
	}
	if m := d.status().Snapshot.Model; m.Unreachable {
		t.Errorf("status model = %+v", m)
	}
	d.stop(stopTimeout)
}

// A model that answers slowly is reachable: a turn that is making progress is never cut by the
// unreachable bound.
func TestE2ESlowModelIsNotUnreachable(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true, Script: func(req mockmodel.Request) mockmodel.Reply {
		r := mockmodel.DefaultScript(req)
		r.Latency = 3 * mockmodel.SlowLatency
		return r
	}})
	d := e.start("--model-unreachable-timeout", "1s")
	r := newLocalClient(t, d).send("slow", "take your time")
	if r.Status != "completed" {
		t.Errorf("slow model: %+v", r)
	}
	if l := d.logsWith("turn ended by watchdog"); len(l) != 0 {
		t.Errorf("a watchdog ended the slow turn: %v", l)
	}
	if m := d.status().Snapshot.Model; m.Unreachable || m.Outages != 0 {
		t.Errorf("status model = %+v", m)
	}
	d.stop(stopTimeout)
}
