package chat

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/internal/chatsettings"
	"github.com/molecule-ai/codex-warm/internal/protocol"
	"github.com/molecule-ai/codex-warm/supervisor/chatjob"
)

// jobs answers /compact and /undo with its fields and records the calls.
type jobs struct {
	compact chatjob.CompactResult
	undo    chatjob.UndoResult
	err     error
	calls   []string
	counted []string // ObserveCommand's names
}

func (j *jobs) Compact(_ context.Context, key string) (chatjob.CompactResult, error) {
	j.calls = append(j.calls, "compact "+key)
	return j.compact, j.err
}

func (j *jobs) Undo(_ context.Context, key string, n int) (chatjob.UndoResult, error) {
	j.calls = append(j.calls, "undo "+key+" "+strings.Repeat("I", n))
	return j.undo, j.err
}

type controls struct {
	*chattest.Controls
	*chatsettings.Store
	*jobs
	peers bool
}

func (c controls) PeersMayChoose() bool { return c.peers }

func (c controls) ObserveCommand(name string) { c.jobs.counted = append(c.jobs.counted, name) }

func newControls(t *testing.T) controls {
	t.Helper()
	cat := []protocol.Model{
		{ID: "alpha", IsDefault: true, DefaultReasoningEffort: "medium", SupportedReasoningEfforts: []protocol.ReasoningEffortOption{{ReasoningEffort: "low"}, {ReasoningEffort: "medium"}}},
		{ID: "beta", DefaultReasoningEffort: "high", SupportedReasoningEfforts: []protocol.ReasoningEffortOption{{ReasoningEffort: "high"}}},
	}
	s, err := chatsettings.Open(chatsettings.Config{Catalog: cat})
	if err != nil {
		t.Fatal(err)
	}
	return controls{Controls: &chattest.Controls{}, Store: s, jobs: &jobs{}}
}

func run(c Controls, key, text string) string {
	cmd, ok := ParseCommand(text)
	if !ok {
		return "(not a command)"
	}
	return RunCommand(context.Background(), c, key, cmd, 0)
}

func TestModelAndEffortCommands(t *testing.T) {
	c := newControls(t)
	if got := run(c, "k", "/model"); !strings.Contains(got, "model: alpha (from codex's config)") || !strings.Contains(got, "alpha (current), beta") {
		t.Errorf("/model: %q", got)
	}
	if got := run(c, "k", "/effort low"); !strings.Contains(got, "effort for this chat: low") {
		t.Errorf("/effort low: %q", got)
	}
	got := run(c, "k", "/model beta")
	if !strings.Contains(got, "model for this chat: beta") || !strings.Contains(got, "low, is not one beta supports: it runs with high") {
		t.Errorf("/model beta with effort low: %q", got)
	}
	if got := run(c, "k", "/model nonesuch"); !strings.Contains(got, `"nonesuch" is not allowed; allowed: alpha, beta; nothing changed`) {
		t.Errorf("/model nonesuch: %q", got)
	}
	if got := run(c, "k", "/effort extreme"); !strings.Contains(got, "allowed: high; nothing changed") {
		t.Errorf("/effort extreme: %q", got)
	}
	if r := c.Resolve("k"); r.Model != "beta" || r.Effort != "high" {
		t.Errorf("after the refusals: %+v", r)
	}
	if got := run(c, "other", "/model"); !strings.Contains(got, "model: alpha") {
		t.Errorf("another chat sees this one's choice: %q", got)
	}
	if got := run(c, "k", "/model default"); !strings.Contains(got, "back to the default: alpha") {
		t.Errorf("/model default: %q", got)
	}
	if got := run(c, "k", "/status"); !strings.Contains(got, "model alpha (from codex's config), effort medium") {
		t.Errorf("/status: %q", got)
	}
}

func TestPeersMayNotChooseByDefault(t *testing.T) {
	c := newControls(t)
	for _, text := range []string{"/model beta", "/effort low"} {
		if got := run(c, "peer:ws-1", text); got != textPeerRefused {
			t.Errorf("%s from a peer: %q", text, got)
		}
	}
	if got := run(c, "peer:ws-1", "/model"); !strings.Contains(got, "model: alpha") {
		t.Errorf("a peer may still look: %q", got)
	}
	if len(c.Chosen()) != 0 {
		t.Errorf("a refused peer changed settings: %v", c.Chosen())
	}
	c.peers = true
	if got := run(c, "peer:ws-1", "/model beta"); !strings.Contains(got, "model for this chat: beta") {
		t.Errorf("a peer allowed by the operator: %q", got)
	}
}

func TestCompactAndUndoCommands(t *testing.T) {
	c := newControls(t)
	c.jobs.compact = chatjob.CompactResult{Waited: true, Before: 5000, After: 900}
	if got := run(c, "k", "/compact"); !strings.Contains(got, "after the messages codex was working on") || !strings.Contains(got, "5000 tokens to about 900") {
		t.Errorf("/compact: %q", got)
	}
	c.jobs.undo = chatjob.UndoResult{Messages: []string{"make a.txt"}, Files: []string{"/w/a.txt"}}
	if got := run(c, "k", "/undo"); !strings.Contains(got, `"make a.txt"`) || !strings.Contains(got, "stay changed: /w/a.txt") {
		t.Errorf("/undo: %q", got)
	}
	for _, bad := range []string{"/undo 0", "/undo 99", "/undo two", "/undo -1"} {
		if got := run(c, "k", bad); !strings.HasPrefix(got, "usage: /undo") {
			t.Errorf("%s: %q", bad, got)
		}
	}
	if want := []string{"compact k", "undo k I"}; strings.Join(c.jobs.calls, ",") != strings.Join(want, ",") {
		t.Errorf("calls %v, want %v (bad input must not reach the supervisor)", c.jobs.calls, want)
	}
	for err, want := range map[error]string{
		chatjob.ErrNoConversation:                       "no conversation yet",
		chatjob.ErrChatBusy:                             "not now",
		chatjob.ErrUndoCompacted:                        "compacted since",
		&chatjob.UndoRangeError{Asked: 3, Exchanges: 1}: "has only 1 exchange",
	} {
		c.jobs.err = err
		if got := run(c, "k", "/undo 3"); !strings.Contains(got, want) {
			t.Errorf("undo refused with %v: %q", err, got)
		}
	}
	c.jobs.err = errors.Join(chatjob.ErrNoConversation)
	if got := run(c, "k", "/compact"); !strings.Contains(got, "nothing to compact") {
		t.Errorf("/compact without a conversation: %q", got)
	}
	if got := run(c, "k", "/help"); !strings.Contains(got, "/undo [N]") || !strings.Contains(got, "/compact") || !strings.Contains(got, "/model") {
		t.Errorf("/help does not list the commands: %q", got)
	}
	if got := c.jobs.counted; len(got) < 6 || got[0] != cmdCompact || got[1] != CmdUndo || got[2] != CmdUndo {
		t.Errorf("commands counted %v, want each by its name", got)
	}
	if got := run(&chattest.Controls{}, "k", "/compact"); got != textNotAvailable {
		t.Errorf("/compact without jobs: %q", got)
	}
}
