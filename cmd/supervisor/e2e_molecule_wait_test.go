//go:build linux

package main

// A Molecule message that waits (the model away, the usage limit reached) when the daemon
// reloads: the new image goes on waiting with it, tells the chat nothing new, and answers it
// once when it can.

import (
	"slices"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

func TestE2EMoleculeWaitCrossesReload(t *testing.T) {
	t.Parallel()
	t.Run("model-unreachable", func(t *testing.T) {
		t.Parallel()
		e := newE2E(t, e2eConfig{Platform: moleculetest.Config{AckEnabled: true}})
		installReloadable(t, e)
		d := e.start("--model-unreachable-timeout", "2s")
		e.plat.Enqueue(moleculetest.CanvasMessage("first").WithSeq(1))
		d.waitPlatform("the first answer", func() bool { return len(e.plat.Notifies()) == 1 })
		addr := e.takeModelAway()
		id := e.plat.Enqueue(moleculetest.CanvasMessage("second").WithSeq(2))[0]
		d.waitPlatform("the unreachable notice", func() bool { return len(e.plat.Notifies()) == 2 })
		d.waitUntil("a second try of the message", func() bool { return d.bridgeStats().UnreachableRetries >= 2 })
		if st := e.bridgeState(); st.Cursor == id || slices.Contains(st.Done, id) {
			t.Fatalf("the row was passed while the model was away: %+v", st)
		}

		reloadWaiting(t, e, d)
		d.waitUntil("the new image trying the message", func() bool { return d.bridgeStats().UnreachableRetries >= 2 })
		if n := len(e.plat.Notifies()); n != 2 {
			t.Fatalf("%d notifies after the reload, want the first answer and one notice: %q", n, e.notifyTexts())
		}
		back := e.restartModel(addr)
		d.waitPlatform("the answer after the service came back", func() bool { return len(e.plat.Notifies()) == 3 })
		d.waitPlatform("the mailbox ack", func() bool { return slices.Contains(e.plat.Acks(), 2) })
		d.waitPolls(3)
		notes := e.notifyTexts()
		if len(notes) != 3 || countContaining(notes, "answered when the service is back") != 1 || countContaining(notes, "second") != 1 {
			t.Fatalf("notifies = %q, want the first answer, one notice, and the second answer once", notes)
		}
		if n := len(back.Requests()); n != 1 {
			t.Errorf("the model that came back saw %d requests, want one", n)
		}
		d.stop(stopTimeout)
		d.checkLog()
	})
	t.Run("usage-limit", func(t *testing.T) {
		t.Parallel()
		lim := &limitSwitch{resetIn: 3 * time.Second, on: true}
		e := newE2E(t, e2eConfig{Script: lim.script, Platform: moleculetest.Config{AckEnabled: true}})
		installReloadable(t, e)
		d := e.start("--resume-spacing", "200ms")
		id := e.plat.Enqueue(moleculetest.CanvasMessage("canvas-one").WithSeq(1))[0]
		d.waitPlatform("the usage-limit notice", func() bool { return countContaining(e.replyTexts(), parkedNotice) == 1 })
		d.waitUntil("the message parked", func() bool { return d.bridgeStats().Parked == 1 })

		reloadWaiting(t, e, d)
		d.waitUntil("the message parked again by the new image", func() bool { return d.bridgeStats().Parked == 1 })
		if st := e.bridgeState(); st.Cursor == id || slices.Contains(st.Done, id) {
			t.Fatalf("the row was passed while parked: %+v", st)
		}
		lim.set(false)
		d.waitPlatform("the answer", func() bool { return countContaining(e.replyTexts(), "reply #") == 1 })
		d.waitPlatform("the mailbox ack", func() bool { return slices.Contains(e.plat.Acks(), 1) })
		d.waitPolls(3)
		texts := e.replyTexts()
		if len(texts) != 2 || countContaining(texts, parkedNotice) != 1 || countContaining(texts, "reply #1: canvas-one") != 1 {
			t.Fatalf("replies = %q, want one notice and the answer once", texts)
		}
		d.stop(stopTimeout)
		d.checkLog()
	})
}

// reloadWaiting reloads d's daemon with the binary installed again, as `supervisor reload`
// does, while a message waits, and waits for the new image to take over.
func reloadWaiting(t *testing.T, e *e2e, d *daemonProc) {
	t.Helper()
	installBin(t, e.bin)
	if code, out := e.reloadCmd(); code != 0 {
		t.Fatalf("supervisor reload: exit %d: %s", code, out)
	}
	d.waitUntil("the new image to take over", func() bool {
		return len(d.logsWith("reload: took over from the previous image")) == 1
	})
}
