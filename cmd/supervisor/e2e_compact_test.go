package main

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// compactPrompt begins codex 0.171's compaction request (its last user message);
// compactSummary is what the mock answers it.
const (
	compactPrompt  = "You are performing a CONTEXT CHECKPOINT COMPACTION"
	compactSummary = "SUMMARY-OF-THE-CHAT"
)

// compactionScript answers codex's compaction request with compactSummary (or with fail, when
// set), and the rest as the default script does.
func compactionScript(fail int) func(mockmodel.Request) mockmodel.Reply {
	return func(req mockmodel.Request) mockmodel.Reply {
		if strings.Contains(req.LastUserText, compactPrompt) {
			if fail != 0 {
				return mockmodel.Reply{Status: fail}
			}
			return mockmodel.Reply{Text: compactSummary}
		}
		return mockmodel.DefaultScript(req)
	}
}

// compactionRequests counts the model requests of compactions.
func (e *e2e) compactionRequests() int {
	n := 0
	for _, r := range e.mock.Requests() {
		if strings.Contains(r.LastUserText, compactPrompt) {
			n++
		}
	}
	return n
}

// --compact-after-turns 2: before the chat's third message the daemon compacts the thread with
// codex's own call; the model's request for that message carries the summary and the user's
// messages, not the earlier answers, and the conversation goes on; the next compaction comes two
// turns later.
func TestE2ECompactAfterTurns(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Script: compactionScript(0)})
	d := e.start("--compact-after-turns", "2")
	for i, text := range []string{"one", "two", "three", "four", "five"} {
		e.plat.Enqueue(moleculetest.CanvasMessage(text))
		d.waitPlatform("reply to "+text, func() bool { return len(e.plat.Notifies()) == i+1 })
	}
	if got := e.compactionRequests(); got != 2 {
		t.Errorf("%d compactions, want 2 (before three and before five)", got)
	}
	three := e.requestsFor("three")
	if len(three) != 1 {
		t.Fatalf("%d model requests for three", len(three))
	}
	in := strings.Join(rawInputs(three[0]), "\n")
	if !strings.Contains(in, compactSummary) || !strings.Contains(in, `"one"`) {
		t.Errorf("the request after compaction lacks the summary or the user's first message")
	}
	if strings.Contains(in, "reply #1: one") || strings.Contains(in, "reply #2: two") {
		t.Errorf("the request after compaction still carries the earlier answers")
	}
	// The conversation continued on the same thread: four's request holds three's answer.
	four := e.requestsFor("four")
	if len(four) != 1 || !strings.Contains(strings.Join(rawInputs(four[0]), "\n"), "three") {
		t.Errorf("four's request does not continue the conversation")
	}
	if got := len(d.logsWith("thread compacted")); got != 2 {
		t.Errorf("%d \"thread compacted\" log lines, want 2", got)
	}
	if tot := d.status().Snapshot.Totals; tot.Compactions != 2 || tot.CompactionFailures != 0 {
		t.Errorf("status counts %d compactions and %d failures, want 2 and 0", tot.Compactions, tot.CompactionFailures)
	}
	for _, text := range e.notifyTexts() {
		if strings.Contains(text, "could not be compacted") {
			t.Errorf("a reply carries the failure notice: %q", text)
		}
	}
	d.stop(stopTimeout)
}

// A compaction the model fails: the chat's message is still answered, on the whole history, and
// the chat is told once that its conversation could not be compacted.
func TestE2ECompactFailureNotice(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Script: compactionScript(http.StatusBadRequest)})
	d := e.start("--compact-after-turns", "1")
	for i, text := range []string{"one", "two", "three"} {
		e.plat.Enqueue(moleculetest.CanvasMessage(text))
		d.waitPlatform("reply to "+text, func() bool { return len(e.plat.Notifies()) == i+1 })
	}
	if got := e.compactionRequests(); got < 2 {
		t.Errorf("%d compaction requests, want one before two and one before three", got)
	}
	texts := e.notifyTexts()
	notices := slices.DeleteFunc(slices.Clone(texts), func(s string) bool { return !strings.Contains(s, "could not be compacted") })
	if len(notices) != 1 {
		t.Errorf("replies %q: want the failure notice exactly once", texts)
	}
	t.Logf("replies: %q", texts)
	if tot := d.status().Snapshot.Totals; tot.Compactions != 0 || tot.CompactionFailures < 2 {
		t.Errorf("status counts %d compactions and %d failures, want 0 and at least 2", tot.Compactions, tot.CompactionFailures)
	}
	if three := e.requestsFor("three"); len(three) != 1 || !strings.Contains(strings.Join(rawInputs(three[0]), "\n"), "reply #1: one") {
		t.Errorf("three was not answered on the whole history")
	}
	d.stop(stopTimeout)
}

// rawInputs are a request's input items as text.
func rawInputs(r mockmodel.Request) []string {
	out := make([]string, len(r.Input))
	for i, in := range r.Input {
		out[i] = string(in)
	}
	return out
}
