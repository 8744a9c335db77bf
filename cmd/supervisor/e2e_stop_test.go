package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// A message and /stop in one poll page, 20 times over (real codex; the model never answers, so
// only an interrupt ends a turn): the /stop lands at whatever moment the message has reached —
// still in the inbox, queued in the supervisor, its child starting, its turn/start just
// answered — and every time the message is answered "stopped" or "dropped", never in full and
// never late, and no child is retired: codex refusing an interrupt that arrives before it has
// registered the turn is not an ignored interrupt.
func TestE2EMoleculeStopRightAfterMessage(t *testing.T) {
	e := newE2E(t, e2eConfig{Script: func(req mockmodel.Request) mockmodel.Reply {
		if strings.HasPrefix(req.LastUserText, "hang ") {
			return mockmodel.Reply{Hang: true}
		}
		return mockmodel.DefaultScript(req)
	}})
	d := e.start()
	const rounds = 20
	for i := range rounds {
		e.plat.Enqueue(moleculetest.CanvasMessage(fmt.Sprintf("hang %d", i)), moleculetest.CanvasMessage("/stop"))
		d.waitPlatform(fmt.Sprintf("round %d: the message's reply and the /stop's", i), func() bool {
			return len(e.plat.Notifies()) == 2*(i+1)
		})
	}
	texts := e.notifyTexts()
	stopped := 0
	for _, s := range texts {
		switch {
		case s == "stopped." || strings.HasPrefix(s, "dropped by /stop"):
			stopped++
		case strings.HasPrefix(s, "stopped ") || s == "nothing to stop":
		default:
			t.Errorf("unexpected reply %q", s)
		}
	}
	if stopped != rounds {
		t.Errorf("%d of %d messages answered stopped or dropped; replies: %q", stopped, rounds, texts)
	}
	tot := d.status().Snapshot.Totals
	if len(tot.Retired) != 0 || tot.Restarts != 0 {
		t.Errorf("children retired %v, restarts %d; want none: a refused interrupt is not an ignored one", tot.Retired, tot.Restarts)
	}
	if n := slices.IndexFunc(texts, func(s string) bool { return s == "nothing to stop" }); n >= 0 {
		t.Logf("a /stop found nothing handed over yet (reply %d): its message was dropped as it arrived", n)
	}
	d.stop(stopTimeout)
}
