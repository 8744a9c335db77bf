package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// refusedNotify reports whether the platform refused (503) a notify carrying exactly text.
func (e *e2e) refusedNotify(text string) bool {
	for _, c := range e.plat.CallsTo(moleculetest.RouteNotify) {
		if c.Status == http.StatusServiceUnavailable && strings.Contains(string(c.Body), `"message":"`+text+`"`) {
			return true
		}
	}
	return false
}

// /stop on the Molecule inbox, then a crash before any answer got out (issue 17, item 4): the
// platform refuses every notify (503) and the daemon is SIGKILLed once it has tried to send the
// /stop answer and the stopped message's reply. After the restart the two messages /stop dropped
// never reach the model, and every row is answered exactly once: the decision to drop them was
// stored before anything was sent.
func TestE2EMoleculeStopDropsSurviveCrash(t *testing.T) {
	e := newE2E(t, e2eConfig{Script: func(req mockmodel.Request) mockmodel.Reply {
		if req.LastUserText == "hang here" {
			return mockmodel.Reply{Hang: true}
		}
		return mockmodel.DefaultScript(req)
	}})
	d := e.start()
	e.plat.Enqueue(moleculetest.CanvasMessage("hang here"))
	d.waitHung(1)
	e.plat.Enqueue(moleculetest.CanvasMessage("behind 1"), moleculetest.CanvasMessage("behind 2"))
	d.waitUntil("the rows behind it received", func() bool { return d.bridgeStats().Received == 3 })
	e.plat.FailNext(moleculetest.RouteNotify, 1<<20, http.StatusServiceUnavailable)
	ids := e.plat.Enqueue(moleculetest.CanvasMessage("/stop"))
	d.waitPlatform("the /stop answer and the stopped reply refused", func() bool {
		return e.refusedNotify("stopped 3") && e.refusedNotify("stopped.")
	})
	d.kill()
	e.plat.ClearFailures()

	d2 := e.start()
	d2.waitPlatform("four replies", func() bool { return len(e.plat.Notifies()) >= 4 })
	d2.waitUntil("every reply delivered and the cursor past /stop", func() bool {
		s := d2.bridgeStats()
		return s.Cursor == ids[0] && s.PendingReplies == 0 && s.InFlight == 0 && s.Unacked == 0
	})
	const dropped = "dropped by /stop: codex did not work on this message."
	for text, want := range map[string]int{dropped: 2, "stopped 3": 1, "stopped.": 1} {
		if n := e.countReplies(text); n != want {
			t.Errorf("%q answered %d times, want %d (replies %q)", text, n, want, e.notifyTexts())
		}
	}
	if n := len(e.plat.Notifies()); n != 4 {
		t.Errorf("%d replies, want 4: %q", n, e.notifyTexts())
	}
	for _, text := range []string{"behind 1", "behind 2"} {
		if n := len(e.requestsFor(text)); n != 0 {
			t.Errorf("dropped %q reached the model %d times", text, n)
		}
	}
	d2.stop(stopTimeout)
}
