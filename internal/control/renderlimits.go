package control

import (
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/chat"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// renderLimits writes the account's usage windows, and a warning while work is parked.
func renderLimits(w io.Writer, l supervisor.LimitStatus, now time.Time) {
	if l.Limited {
		fmt.Fprintf(w, "WARNING: the account's usage limit is reached; %d message(s) parked until %s. New turns wait; Molecule messages are answered after the reset, the local inbox answers 429.\n",
			l.Parked, chat.ResetText(l.ResetsAt, now))
	}
	if l.Primary == nil && l.Secondary == nil {
		return
	}
	fmt.Fprint(w, "usage limits:")
	for _, win := range []struct {
		name string
		w    *supervisor.LimitWindow
	}{{"primary", l.Primary}, {"secondary", l.Secondary}} {
		if win.w == nil {
			continue
		}
		fmt.Fprintf(w, "  %s %.0f%%", win.name, win.w.UsedPercent)
		if win.w.WindowMinutes > 0 {
			fmt.Fprintf(w, " of %s", windowText(win.w.WindowMinutes))
		}
		if !win.w.ResetsAt.IsZero() {
			fmt.Fprintf(w, ", resets %s", chat.ResetText(win.w.ResetsAt, now))
		}
	}
	if l.Hits > 0 {
		fmt.Fprintf(w, "  limit reached %d time(s)", l.Hits)
	}
	fmt.Fprintln(w)
}

// renderUsage writes each chat's token totals.
func renderUsage(w io.Writer, usage map[string]supervisor.ChatUsage, now time.Time) {
	if len(usage) == 0 {
		return
	}
	keys := make([]string, 0, len(usage))
	for k := range usage {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHAT\tTURNS\tINPUT\tCACHED\tOUTPUT\tREASONING\tLAST TURN")
	for _, k := range keys {
		u := usage[k]
		last := "-" // kept since the token totals carry it
		if !u.LastTurnAt.IsZero() {
			last = ShortDuration(now.Sub(u.LastTurnAt)) + " ago"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\n", k, u.Turns, u.InputTokens, u.CachedInputTokens, u.OutputTokens, u.ReasoningOutputTokens, last)
	}
	tw.Flush()
}

// windowText is a usage window's length: "5h", "7d", "90m".
func windowText(minutes int64) string {
	switch {
	case minutes%(24*60) == 0:
		return fmt.Sprintf("%dd", minutes/(24*60))
	case minutes%60 == 0:
		return fmt.Sprintf("%dh", minutes/60)
	}
	return fmt.Sprintf("%dm", minutes)
}
