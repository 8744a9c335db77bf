package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/local"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// --busy steer on real codex: a message sent while the chat's turn runs joins that turn through
// turn/steer. The model's next request carries both user texts, one turn answers both (one turn
// id; the second caller gets the same reply, marked steered), and the chat's next message is a
// turn of its own with both in its history.
func TestE2EBusySteerMergesIntoOneReply(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	e := newE2E(t, e2eConfig{Local: true, Script: func(req mockmodel.Request) mockmodel.Reply {
		r := mockmodel.Reply{Text: "saw: " + strings.Join(req.UserTexts, " | ")}
		if req.LastUserText == "steer me" {
			r.Hold = hold // the turn runs until the second message joined it
		}
		return r
	}})
	d := e.start("--busy", "steer")
	c := newLocalClient(t, d)

	first := c.sendAsync("k", "steer me")
	d.waitRequests(1)
	second := c.sendAsync("k", "and this")
	d.waitUntil("the second message steered into the turn", func() bool {
		return len(d.logsWith("message added to the running turn")) == 1
	})
	close(hold)
	r1, r2 := <-first, <-second
	if r1.Status != "completed" || r1.Text != "saw: steer me | and this" || r1.Steered {
		t.Fatalf("first message: %+v, want the one reply to both", r1)
	}
	if r2.Status != "completed" || r2.Text != r1.Text || r2.TurnID != r1.TurnID || !r2.Steered {
		t.Fatalf("steered message: %+v, want turn %s's reply, steered", r2, r1.TurnID)
	}
	if reqs := e.requestsFor("and this"); len(reqs) == 0 || !slices.Equal(reqs[len(reqs)-1].UserTexts, []string{"steer me", "and this"}) {
		t.Fatalf("model requests for the steered text: %+v, want both texts in one request", reqs)
	}
	after := c.send("k", "after")
	if after.TurnID == r1.TurnID || after.ThreadID != r1.ThreadID || after.Text != "saw: steer me | and this | after" || after.Steered {
		t.Fatalf("next message: %+v, want its own turn on the thread with both earlier texts", after)
	}
	d.stop(stopTimeout)
}

// --busy interrupt on real codex: a message sent while the chat's turn hangs interrupts it. The
// hung message is answered "interrupted by a newer message" (status superseded), the new one
// runs next on the same thread and its model request carries the chat's history.
func TestE2EBusyInterruptRunsNewerMessage(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true})
	d := e.start("--busy", "interrupt")
	c := newLocalClient(t, d)
	first := c.send("k", "first")

	hung := c.sendAsync("k", "HANG here")
	d.waitHung(1)
	newer := c.sendAsync("k", "newer")
	r := <-hung
	if r.Status != local.StatusSuperseded || !strings.HasPrefix(r.Text, "interrupted by a newer message") || r.TurnID == "" {
		t.Fatalf("hung message: %+v, want superseded", r)
	}
	n := <-newer
	if n.Status != "completed" || n.ThreadID != first.ThreadID || !strings.HasSuffix(n.Text, ": newer") {
		t.Fatalf("newer message: %+v, want answered on thread %s", n, first.ThreadID)
	}
	if reqs := e.requestsFor("newer"); len(reqs) != 1 || !slices.Contains(reqs[0].UserTexts, "first") {
		t.Fatalf("model requests for the newer message: %+v, want one with the history", reqs)
	}
	d.stop(stopTimeout)
}

// --busy steer on the Molecule inbox: the chat's second row reaches the running turn (the inbox
// hands rows over without waiting for the previous reply). Both rows are answered once: the
// first with the reply to both texts, the second with a short note; the cursor passes both.
func TestE2EMoleculeBusySteer(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	e := newE2E(t, e2eConfig{Script: func(req mockmodel.Request) mockmodel.Reply {
		r := mockmodel.Reply{Text: "saw: " + strings.Join(req.UserTexts, " | ")}
		if req.LastUserText == "steer me" {
			r.Hold = hold
		}
		return r
	}})
	d := e.start("--busy", "steer")
	e.plat.Enqueue(moleculetest.CanvasMessage("steer me"))
	d.waitRequests(1)
	ids := e.plat.Enqueue(moleculetest.CanvasMessage("and this"))
	d.waitUntil("the second row steered into the turn", func() bool {
		return len(d.logsWith("message added to the running turn")) == 1
	})
	close(hold)
	d.waitPlatform("two replies", func() bool { return len(e.plat.Notifies()) == 2 })
	got := e.notifyTexts()
	slices.Sort(got)
	want := []string{"(added to the running turn; codex answered it together with the message before it)", "saw: steer me | and this"}
	if !slices.Equal(got, want) {
		t.Fatalf("replies %q, want %q", got, want)
	}
	d.waitUntil("the cursor past both rows", func() bool { return d.bridgeStats().Cursor == ids[0] })
	if s := d.bridgeStats(); s.CodexFailures != 0 {
		t.Errorf("stats %+v, want no codex failures", s)
	}
	d.stop(stopTimeout)
}

// --busy interrupt on the Molecule inbox: the chat's second row interrupts the hung turn; the
// first row is answered "interrupted by a newer message", the second normally.
func TestE2EMoleculeBusyInterrupt(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{})
	d := e.start("--busy", "interrupt")
	e.plat.Enqueue(moleculetest.CanvasMessage("HANG here"))
	d.waitHung(1)
	e.plat.Enqueue(moleculetest.CanvasMessage("newer"))
	d.waitPlatform("two replies", func() bool { return len(e.plat.Notifies()) == 2 })
	got := e.notifyTexts()
	slices.Sort(got)
	if len(got) != 2 || got[0] != "interrupted by a newer message." || !strings.HasSuffix(got[1], ": newer") {
		t.Fatalf("replies %q, want the hung row superseded and the newer one answered", got)
	}
	d.stop(stopTimeout)
}

// --busy steer, then /stop, on the Molecule inbox: the row steered into the hung turn is told
// that it was stopped, not that codex answered it (issue 17, item 9).
func TestE2EMoleculeBusySteerThenStop(t *testing.T) {
	e := newE2E(t, e2eConfig{Script: func(req mockmodel.Request) mockmodel.Reply {
		// codex asks the model again once a text joins the turn: that request hangs too.
		if slices.Contains(req.UserTexts, "hang here") {
			return mockmodel.Reply{Hang: true}
		}
		return mockmodel.DefaultScript(req)
	}})
	d := e.start("--busy", "steer")
	e.plat.Enqueue(moleculetest.CanvasMessage("hang here"))
	d.waitHung(1)
	e.plat.Enqueue(moleculetest.CanvasMessage("and this"))
	d.waitUntil("the second row steered into the turn", func() bool {
		return len(d.logsWith("message added to the running turn")) == 1
	})
	ids := e.plat.Enqueue(moleculetest.CanvasMessage("/stop"))
	d.waitPlatform("three replies", func() bool { return len(e.plat.Notifies()) == 3 })
	got := e.notifyTexts()
	slices.Sort(got)
	want := []string{"stopped: this message had joined the running turn, which /stop ended; what codex had written so far went to the message before it.", "stopped 1", "stopped."}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("replies %q, want %q", got, want)
	}
	d.waitUntil("the cursor past every row", func() bool { return d.bridgeStats().Cursor == ids[0] })
	d.stop(stopTimeout)
}
