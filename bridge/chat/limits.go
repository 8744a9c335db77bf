package chat

import (
	"fmt"
	"strings"
	"time"

	"github.com/molecule-ai/codex-warm/supervisor"
)

// LabelUsageLimit: the account's usage limit kept the message from codex (not the user's doing).
const LabelUsageLimit = "usage_limit"

// ResetText says when a usage limit resets, in the host's local time and from now:
// "14:02 CET (in 2h13m)", with the day when it is not today.
func ResetText(at, now time.Time) string {
	local, today := at.Local(), now.Local()
	layout := "15:04 MST"
	if local.YearDay() != today.YearDay() || local.Year() != today.Year() {
		layout = "Mon Jan 2 15:04 MST"
	}
	return fmt.Sprintf("%s (in %s)", local.Format(layout), untilText(at.Sub(now)))
}

// untilText is a wait rounded for people: "45s", "13m", "2h13m", "5d3h".
func untilText(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", max(0, int(d.Round(time.Second)/time.Second)))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Round(time.Minute)/time.Minute))
	case d < 48*time.Hour:
		d = d.Round(time.Minute)
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	d = d.Round(time.Hour)
	return fmt.Sprintf("%dd%dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

// UsageLimitParkedText tells a chat, once, that its message waits for the account's usage limit
// to reset.
func UsageLimitParkedText(e *supervisor.UsageLimitError, now time.Time) string {
	if e.UnknownReset {
		return fmt.Sprintf("usage limit reached; codex did not say when it resets: your message will be tried again after %s.", ResetText(e.ResetsAt, now))
	}
	return fmt.Sprintf("usage limit reached; your message will be answered after %s.", ResetText(e.ResetsAt, now))
}

// UsageLimitText answers a message that will not wait for the reset: the local inbox's
// (its client sends again), or one whose wait would pass --park-limit.
func UsageLimitText(e *supervisor.UsageLimitError, now time.Time) string {
	if e.UnknownReset {
		return fmt.Sprintf("usage limit reached (codex did not say until when); please send your message again after %s.", ResetText(e.ResetsAt, now))
	}
	return fmt.Sprintf("usage limit reached: the account's usage resets at %s; please send your message again then.", ResetText(e.ResetsAt, now))
}

// UsageSource reports the account's usage limits and a chat's token usage
// (*supervisor.Supervisor). /status shows them when the Controls implement it.
type UsageSource interface {
	Limits() supervisor.LimitStatus
	ChatUsage(chatKey string) supervisor.ChatUsage
}

// usageStatusText is /status's line on the chat's tokens and the account's usage windows.
func usageStatusText(u UsageSource, chatKey string, now time.Time) string {
	var b strings.Builder
	cu := u.ChatUsage(chatKey)
	fmt.Fprintf(&b, "tokens: %d in (%d cached), %d out (%d reasoning) over %d turns", cu.InputTokens, cu.CachedInputTokens,
		cu.OutputTokens, cu.ReasoningOutputTokens, cu.Turns)
	l := u.Limits()
	for _, win := range []struct {
		name string
		w    *supervisor.LimitWindow
	}{{"5h", l.Primary}, {"weekly", l.Secondary}} {
		if win.w == nil {
			continue
		}
		fmt.Fprintf(&b, "; %s limit %.0f%% used", win.name, win.w.UsedPercent)
		if !win.w.ResetsAt.IsZero() {
			fmt.Fprintf(&b, ", resets %s", ResetText(win.w.ResetsAt, now))
		}
	}
	if l.Limited {
		fmt.Fprintf(&b, "; usage limit reached: messages wait until %s", ResetText(l.ResetsAt, now))
	}
	return b.String()
}
