package chat

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/supervisor"
)

func TestUntilText(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second: "0s", 4 * time.Second: "4s", 13 * time.Minute: "13m", 2*time.Hour + 13*time.Minute: "2h13m",
		47 * time.Hour: "47h00m", 5*24*time.Hour + 3*time.Hour: "5d3h",
	} {
		if got := untilText(d); got != want {
			t.Errorf("untilText(%v) = %q, want %q", d, got, want)
		}
	}
}

// A usage limit is its own outcome, label and text: not a failed turn, not busy.
func TestUsageLimitOutcome(t *testing.T) {
	now := time.Now()
	ul := &supervisor.UsageLimitError{ChatKey: "canvas:ws", ResetsAt: now.Add(2*time.Hour + 13*time.Minute)}
	err := fmt.Errorf("wrapped: %w", ul)
	if oc := Classify(supervisor.Reply{}, err); oc != OutcomeUsageLimit {
		t.Errorf("Classify = %v", oc)
	}
	if l := OutcomeLabel(supervisor.Reply{}, err); l != LabelUsageLimit {
		t.Errorf("OutcomeLabel = %q", l)
	}
	if text := ReplyText(supervisor.Reply{}, err); !strings.HasPrefix(text, "usage limit reached: the account's usage resets at ") || !strings.Contains(text, "(in 2h1") {
		t.Errorf("ReplyText = %q", text)
	}
	if text := UsageLimitParkedText(ul, now); !strings.HasPrefix(text, "usage limit reached; your message will be answered after ") || !strings.HasSuffix(text, "(in 2h13m).") {
		t.Errorf("parked text = %q", text)
	}
	unknown := &supervisor.UsageLimitError{ResetsAt: now.Add(5 * time.Minute), UnknownReset: true}
	if text := UsageLimitParkedText(unknown, now); !strings.Contains(text, "did not say when it resets") {
		t.Errorf("unknown reset text = %q", text)
	}
	if errors.Is(err, supervisor.ErrQueueFull) {
		t.Error("a usage limit reads as busy")
	}
}

// /status adds the chat's tokens and the account's windows when the controls report them.
func TestUsageStatusText(t *testing.T) {
	now := time.Now()
	u := fakeUsage{limits: supervisor.LimitStatus{Limited: true, ResetsAt: now.Add(time.Hour),
		Primary: &supervisor.LimitWindow{UsedPercent: 100, ResetsAt: now.Add(time.Hour)}},
		chat: supervisor.ChatUsage{Turns: 2}}
	u.chat.InputTokens, u.chat.CachedInputTokens, u.chat.OutputTokens, u.chat.ReasoningOutputTokens = 20, 8, 6, 4
	got := usageStatusText(u, "canvas:ws", now)
	for _, want := range []string{"tokens: 20 in (8 cached), 6 out (4 reasoning) over 2 turns", "5h limit 100% used, resets ", "usage limit reached: messages wait until "} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "weekly") {
		t.Errorf("%q shows a window codex did not report", got)
	}
}

type fakeUsage struct {
	limits supervisor.LimitStatus
	chat   supervisor.ChatUsage
}

func (f fakeUsage) Limits() supervisor.LimitStatus        { return f.limits }
func (f fakeUsage) ChatUsage(string) supervisor.ChatUsage { return f.chat }
