package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

// /new on the Molecule inbox under --busy queue (the default), right behind a message in the
// same poll page (issue 17, item 7): the message sent before /new runs on the old thread (the
// model sees the chat's history), and the message after /new, in the same page too, opens the
// new one. A /new alone then starts over at once, naming the thread it leaves.
func TestE2EMoleculeNewKeepsEarlierMessageOnOldThread(t *testing.T) {
	e := newE2E(t, e2eConfig{})
	d := e.start()
	e.plat.Enqueue(moleculetest.CanvasMessage("one"))
	d.waitPlatform("the first reply", func() bool { return len(e.plat.Notifies()) == 1 })
	e.plat.Enqueue(moleculetest.CanvasMessage("two"), moleculetest.CanvasMessage("/new"), moleculetest.CanvasMessage("three"))
	d.waitPlatform("two replies and the /new answer", func() bool { return len(e.plat.Notifies()) == 4 })
	if got := e.userTextsFor("two"); len(got) != 1 || !slices.Equal(got[0], []string{"one", "two"}) {
		t.Errorf("the message before /new: the model saw %q, want one request with [one two] (the old thread)", got)
	}
	if got := e.userTextsFor("three"); len(got) != 1 || !slices.Equal(got[0], []string{"three"}) {
		t.Errorf("the message after /new: the model saw %q, want one request with [three] (a new thread)", got)
	}
	if !slices.ContainsFunc(e.notifyTexts(), func(s string) bool { return strings.HasPrefix(s, "starting over once") }) {
		t.Errorf("replies %q, want the /new answered as deferred behind \"two\"", e.notifyTexts())
	}

	// The chat's worker ends its job after the reply's delivery and the row's acknowledgement;
	// a /new read before that is put behind it (and says so), which is as correct: what holds
	// either way is that the next message opens a new conversation.
	d.waitUntil("every row acknowledged", func() bool { return d.bridgeStats().Unacked == 0 })
	e.plat.Enqueue(moleculetest.CanvasMessage("/new"))
	d.waitPlatform("the second /new answered", func() bool { return len(e.plat.Notifies()) == 5 })
	if got := e.notifyTexts()[4]; !strings.HasPrefix(got, "started over") && !strings.HasPrefix(got, "starting over once") {
		t.Errorf("/new with nothing queued: %q, want started over", got)
	}
	e.plat.Enqueue(moleculetest.CanvasMessage("four"))
	d.waitPlatform("the reply after the second /new", func() bool { return len(e.plat.Notifies()) == 6 })
	if got := e.userTextsFor("four"); len(got) != 1 || !slices.Equal(got[0], []string{"four"}) {
		t.Errorf("the message after the second /new: the model saw %q, want [four]", got)
	}
	d.stop(stopTimeout)
}

// userTextsFor returns the user texts of each model request made for the message text.
func (e *e2e) userTextsFor(text string) [][]string {
	var out [][]string
	for _, r := range e.requestsFor(text) {
		out = append(out, r.UserTexts)
	}
	return out
}
