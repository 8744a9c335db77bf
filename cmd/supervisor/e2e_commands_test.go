package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/local"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// sendAsync posts text to chatKey in its own goroutine; the channel yields the reply.
func (c *localClient) sendAsync(chatKey, text string) <-chan local.Reply {
	out := make(chan local.Reply, 1)
	go func() {
		body, _ := json.Marshal(local.Message{Text: text})
		code, b, _ := c.post(chatKey, string(body))
		var r local.Reply
		if code != 200 || json.Unmarshal(b, &r) != nil {
			r = local.Reply{Status: "HTTP error", Text: string(b)}
		}
		out <- r
	}()
	return out
}

// /stop while codex hangs in a turn (real codex, the model stream never ends): the command is
// answered at once, not behind the hung turn; the hung message is answered "stopped", the one
// queued behind it "dropped", and the chat's next message runs on the same thread with the
// earlier history. /status and /help answer without a turn.
func TestE2EChatStop(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true, Script: func(req mockmodel.Request) mockmodel.Reply {
		if req.LastUserText == "hang here" {
			return mockmodel.Reply{Hang: true}
		}
		return mockmodel.DefaultScript(req)
	}})
	d := e.start()
	c := newLocalClient(t, d)
	first := c.send("k", "first")

	hung := c.sendAsync("k", "hang here")
	d.waitHung(1)
	queued := c.sendAsync("k", "behind it")
	d.waitUntil("the second message queued", func() bool { return d.status().Snapshot.Totals.Queued == 1 })

	if r := c.send("k", "/status"); r.Status != local.StatusCommand || !strings.Contains(r.Text, "busy") || !strings.Contains(r.Text, "1 queued") {
		t.Errorf("/status during the hung turn: %+v", r)
	}
	start := time.Now()
	stop := c.send("k", "/STOP")
	t.Logf("/stop answered in %s", time.Since(start))
	if stop.Status != local.StatusCommand || stop.Text != "stopped 2" {
		t.Fatalf("/stop: %+v, want stopped 2", stop)
	}
	if r := <-hung; r.Status != local.StatusStopped || !strings.HasPrefix(r.Text, "stopped") || r.TurnID == "" {
		t.Errorf("hung message: %+v, want stopped", r)
	}
	if r := <-queued; r.Status != local.StatusStopped || !strings.Contains(r.Text, "dropped") {
		t.Errorf("queued message: %+v, want dropped", r)
	}
	if n := len(e.requestsFor("behind it")); n != 0 {
		t.Errorf("the dropped message reached the model %d times", n)
	}
	after := c.send("k", "after")
	if after.ThreadID != first.ThreadID {
		t.Errorf("after /stop: thread %s, want %s", after.ThreadID, first.ThreadID)
	}
	if reqs := e.requestsFor("after"); len(reqs) != 1 || !slices.Contains(reqs[0].UserTexts, "first") {
		t.Errorf("after /stop the model saw %+v, want the history with \"first\"", reqs)
	}
	if r := c.send("k", "/stop"); r.Text != "nothing to stop" {
		t.Errorf("/stop with nothing running: %+v", r)
	}
	if r := c.send("k", "/help"); r.Status != local.StatusCommand || !strings.Contains(r.Text, "/new") || strings.Contains(r.Text, "/approve") {
		t.Errorf("/help (approvals not asked, so no /approve): %+v", r)
	}
	if r := c.send("k", "/etc/hosts"); r.Status != "completed" {
		t.Errorf("a pasted path went to codex? %+v", r)
	}
	d.stop(stopTimeout)
}

// /new: the chat's next message opens a new thread (the model sees one user message), the old
// thread id is kept in the state dir's archive, and the new thread survives a daemon restart.
// With --chat-commands=false, /new is text for codex.
func TestE2EChatNew(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true})
	d := e.start()
	c := newLocalClient(t, d)
	old := c.send("k", "one")
	c.send("k", "two")
	r := c.send("k", "/new")
	if r.Status != local.StatusCommand || !strings.Contains(r.Text, "started over") || !strings.Contains(r.Text, old.ThreadID) {
		t.Fatalf("/new: %+v", r)
	}
	fresh := c.send("k", "three")
	if fresh.ThreadID == old.ThreadID || fresh.Text != "reply #1: three" {
		t.Fatalf("after /new: %+v, want a new thread (old %s)", fresh, old.ThreadID)
	}
	if reqs := e.requestsFor("three"); len(reqs) != 1 || !slices.Equal(reqs[0].UserTexts, []string{"three"}) {
		t.Fatalf("after /new the model saw %+v, want only the new message", reqs)
	}
	d.stop(stopTimeout)

	if got := e.sessionsFile()["k"]; got != fresh.ThreadID {
		t.Errorf("sessions.json: k = %q, want the new thread %s", got, fresh.ThreadID)
	}
	f, err := os.Open(filepath.Join(e.stateDir, "threads-archive.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var archived []string
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var a struct {
			ChatKey  string `json:"chat_key"`
			ThreadID string `json:"thread_id"`
		}
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			t.Fatal(err)
		}
		archived = append(archived, a.ChatKey+"="+a.ThreadID)
	}
	if want := []string{"k=" + old.ThreadID}; !slices.Equal(archived, want) {
		t.Errorf("archive %v, want %v", archived, want)
	}

	d2 := e.start("--chat-commands=false")
	c2 := newLocalClient(t, d2)
	if r := c2.send("k", "four"); r.ThreadID != fresh.ThreadID || r.Text != "reply #2: four" {
		t.Errorf("after restart: %+v, want reply #2 on %s", r, fresh.ThreadID)
	}
	if r := c2.send("k", "/new"); r.Status != "completed" || r.ThreadID != fresh.ThreadID {
		t.Errorf("/new with commands off: %+v, want a turn on the same thread", r)
	}
	d2.stop(stopTimeout)
}

// The Molecule inbox: /stop from the canvas while codex hangs is answered beside the hung turn;
// the hung message is answered "stopped" and the two messages this inbox still held are each
// answered "dropped", so every row is answered once and the cursor passes them all; the chat's
// next message keeps its history. A peer's /status is answered over A2A without a turn.
func TestE2EMoleculeChatStop(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Script: func(req mockmodel.Request) mockmodel.Reply {
		if req.LastUserText == "hang here" {
			return mockmodel.Reply{Hang: true}
		}
		return mockmodel.DefaultScript(req)
	}})
	d := e.start()
	e.plat.Enqueue(moleculetest.CanvasMessage("first"))
	d.waitPlatform("the first reply", func() bool { return len(e.plat.Notifies()) == 1 })
	e.plat.Enqueue(moleculetest.CanvasMessage("hang here"))
	d.waitHung(1)
	e.plat.Enqueue(moleculetest.CanvasMessage("behind 1"), moleculetest.CanvasMessage("behind 2"))
	d.waitUntil("both rows received", func() bool { return d.bridgeStats().Received == 4 })
	ids := e.plat.Enqueue(moleculetest.CanvasMessage("/stop"))
	d.waitPlatform("five replies", func() bool { return len(e.plat.Notifies()) == 5 })
	got := e.notifyTexts()[1:]
	slices.Sort(got)
	want := []string{"dropped by /stop: codex did not work on this message.", "dropped by /stop: codex did not work on this message.", "stopped 3", "stopped."}
	if !slices.Equal(got, want) {
		t.Fatalf("replies after /stop = %q, want %q", got, want)
	}
	d.waitUntil("the cursor past /stop", func() bool { return d.bridgeStats().Cursor == ids[0] })
	for _, text := range []string{"behind 1", "behind 2"} {
		if n := len(e.requestsFor(text)); n != 0 {
			t.Errorf("dropped %q reached the model %d times", text, n)
		}
	}

	e.plat.Enqueue(moleculetest.CanvasMessage("after"))
	d.waitPlatform("the reply after /stop", func() bool { return len(e.plat.Notifies()) == 6 })
	if reqs := e.requestsFor("after"); len(reqs) != 1 || !slices.Contains(reqs[0].UserTexts, "first") {
		t.Errorf("after /stop the model saw %+v, want the history with \"first\"", reqs)
	}
	e.plat.Enqueue(moleculetest.PeerMessage("peer-b", "/status"))
	d.waitPlatform("the peer's status", func() bool { return len(e.plat.A2ASends()) == 1 })
	if s := e.plat.A2ASends()[0].Text; !strings.Contains(s, "no codex session") {
		t.Errorf("peer /status = %q, want its own chat's status (no session yet)", s)
	}
	if s := d.bridgeStats(); s.Commands != 2 || s.CodexFailures != 0 {
		t.Errorf("stats %+v, want 2 commands and no codex failures", s)
	}
	d.stop(stopTimeout)
}
