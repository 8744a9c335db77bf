package control

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/molecule"
	"github.com/molecule-ai/codex-warm/internal/codexauth"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// renderMolecule prints the Molecule inbox's counters below the totals: what was received and
// delivered, what waits (replies not delivered, rows not acknowledged), and what went wrong.
func renderMolecule(w io.Writer, s *molecule.Stats) {
	if s.Refused != "" {
		fmt.Fprintf(w, "WARNING: not ready: %s\n", s.Refused)
	}
	fmt.Fprintf(w, "molecule: received %d  answered %d  delivered %d  delivery retries %d  delivery failures %d  pending replies %d  unacked %d  in flight %d\n",
		s.Received, s.Answered, s.Delivered, s.DeliveryRetries, s.DeliveryFailed, s.PendingReplies, s.Unacked, s.InFlight)
	fmt.Fprintf(w, "  codex failures %d  poison %d  duplicates %d  busy retries %d  unreachable retries %d  parked %d (too long %d)  commands %d  recovered %d\n",
		s.CodexFailures, s.Poison, s.Duplicates, s.BusyRetries, s.UnreachableRetries, s.Parked, s.ParkedTooLong, s.Commands, s.Recovered)
	cursor := s.Cursor
	if cursor == "" {
		cursor = "-"
	}
	fmt.Fprintf(w, "  poll errors %d  heartbeat errors %d  state write errors %d  cursor %s\n",
		s.PollErrors, s.HeartbeatErrors, s.PersistErrors, cursor)
	fmt.Fprintf(w, "  files sent %d  refused %d  tool chips sent %d (coalesced %d, dropped %d, failed %d)\n",
		s.FilesSent, s.FilesRefused, s.Chips.Sent, s.Chips.Coalesced, s.Chips.Dropped, s.Chips.Failed)
	state := s.Stream.State
	if state == "" {
		state = molecule.StreamOff
	}
	fmt.Fprintf(w, "  event stream %s  connects %d  wake-ups %d  polls", state, s.Stream.Connects, s.Stream.Wakeups)
	causes := make([]string, 0, len(s.Polls))
	for c := range s.Polls {
		causes = append(causes, c)
	}
	sort.Strings(causes)
	for _, c := range causes {
		fmt.Fprintf(w, " %s %d", c, s.Polls[c])
	}
	fmt.Fprintln(w)
	switch b := s.Budget; {
	case b.Limit < 0:
		fmt.Fprintf(w, "  rate budget unlimited")
	case b.Limit == 0:
		fmt.Fprintf(w, "  rate budget not known yet")
	default:
		fmt.Fprintf(w, "  rate budget %d of %d left", b.Remaining, b.Limit)
	}
	fmt.Fprintf(w, "  optional requests sent %d, held back %d\n", s.Budget.OptionalSent, s.Budget.OptionalDropped)
}

// Render prints the process table like ps: the daemon's header and warnings, one aligned row
// per live child, then totals, the inbox's counters, the sections parts added (doc.Sections)
// and the chats' token totals.
func Render(w io.Writer, doc StatusDoc, now time.Time) {
	renderDaemon(w, doc.Daemon, now)
	if a := doc.Daemon.CodexAuth; a != nil {
		renderCodexAuth(w, doc.Daemon.CodexVersion, a, now)
	}
	// An outage always has its start; a document without one (a daemon from before the model
	// check, or a hand-made one) says nothing about the model.
	if m := doc.Snapshot.Model; m.Unreachable && !m.Since.IsZero() {
		fmt.Fprintf(w, "WARNING: the model service cannot be reached (since %s ago): %s. Turns end at once; Molecule messages wait and are answered when it is back.\n",
			ShortDuration(now.Sub(m.Since)), m.Cause)
	}
	for _, c := range doc.NotReady {
		fmt.Fprintf(w, "WARNING: not ready (%s): %s\n", c.Part, c.Text)
	}
	renderLimits(w, doc.Snapshot.Limits, now)
	fmt.Fprintln(w)
	renderChildren(w, doc.Snapshot, now)
	renderTotals(w, doc)
	if f := doc.LocalFiles; f != nil && f.Sent+f.Refused > 0 {
		fmt.Fprintf(w, "local inbox: files sent %d  refused %d\n", f.Sent, f.Refused)
	}
	if doc.Bridge != nil {
		renderMolecule(w, doc.Bridge)
	}
	renderModels(w, doc.Models)
	renderSections(w, doc.Sections)
	renderUsage(w, doc.Snapshot.Usage, now)
}

// renderDaemon writes the header: version, pid, uptime, inbox and listeners, state directory,
// start and the last reload.
func renderDaemon(w io.Writer, d DaemonInfo, now time.Time) {
	fmt.Fprintf(w, "supervisor %s  pid %d  up %s  inbox %s", d.Version, d.PID, ShortDuration(now.Sub(d.Started)), d.Inbox)
	if d.Listen != "" {
		fmt.Fprintf(w, " (%s)", d.Listen)
	}
	if d.MetricsListen != "" {
		fmt.Fprintf(w, "  metrics %s", d.MetricsListen)
	}
	fmt.Fprintf(w, "\nstate %s\n", d.StateDir)
	fmt.Fprintf(w, "started %s", d.Started.Format(time.RFC3339))
	if r := d.LastReload; r != nil {
		fmt.Fprintf(w, "  reloads %d  last reload %s ago (%s, %s", d.Reloads, ShortDuration(now.Sub(r.At)), r.Trigger, r.Outcome)
		if r.Error != "" {
			fmt.Fprintf(w, ": %s", r.Error)
		}
		fmt.Fprint(w, ")")
	}
	fmt.Fprintln(w)
}

// renderCodexAuth writes codex's version and login, the ChatGPT tokens the daemon holds, and
// the warnings about them.
func renderCodexAuth(w io.Writer, version string, a *CodexAuth, now time.Time) {
	fmt.Fprintf(w, "codex %s  login %s", version, a.State)
	if a.Account != "" {
		fmt.Fprintf(w, " (%s)", a.Account)
	}
	fmt.Fprintf(w, ", checked %s ago", ShortDuration(now.Sub(a.Checked)))
	if a.LoginOwner != "" {
		fmt.Fprintf(w, ", login owned by the %s", a.LoginOwner)
	}
	fmt.Fprintln(w)
	if t := a.Tokens; t != nil {
		held := "held by the daemon"
		if t.Owner == codexauth.OwnerPlatform {
			held = "read from the platform (" + t.Source + "), never refreshed by the daemon"
		}
		fmt.Fprintf(w, "chatgpt tokens %s: %s", held, t.State)
		if !t.Expires.IsZero() {
			fmt.Fprintf(w, ", expires in %s", ShortDuration(t.Expires.Sub(now)))
		}
		if !t.LastRefresh.IsZero() {
			fmt.Fprintf(w, ", last refresh %s ago", ShortDuration(now.Sub(t.LastRefresh)))
		}
		if t.LastOutcome != "" {
			fmt.Fprintf(w, " (%s)", t.LastOutcome)
		}
		fmt.Fprintln(w)
	}
	if t := a.Tokens; t != nil && t.WriteBackError != "" {
		fmt.Fprintf(w, "WARNING: the refreshed ChatGPT login could not be written back to auth.json (%s): the daemon holds the only copy "+
			"of the live refresh token and retries the write. Free space or fix permissions in CODEX_HOME; do not restart the daemon until this line is gone.\n", t.WriteBackError)
	}
	if t := a.Tokens; t != nil && t.State == codexauth.StateUncertain {
		fmt.Fprintf(w, "WARNING: refresh_uncertain: %s\n", t.LastError)
	}
	if a.State == CodexNotLoggedIn {
		fmt.Fprintln(w, "WARNING: codex is not logged in: every message is answered with a login hint. "+
			"Run `codex login` as the daemon's user, with its CODEX_HOME.")
	}
}

// renderChildren writes the process table: one aligned row per live child (or, with shared
// children, per chat's thread), sorted by chat key.
func renderChildren(w io.Writer, snap supervisor.Snapshot, now time.Time) {
	rows := append([]supervisor.ChildStatus(nil), snap.Children...)
	sort.Slice(rows, func(i, j int) bool { return rows[i].ChatKey < rows[j].ChatKey })
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	// PSS, not RSS: warm children share the codex binary's pages, which RSS counts once per child.
	// With shared children (--threads-per-child) a row is a chat's thread: THREADS says how many
	// share its child, and PSS is the row's share of the child's.
	shared := snap.Totals.ThreadsPerChild > 1
	threadsCol := ""
	if shared {
		threadsCol = "\tTHREADS"
	}
	fmt.Fprintln(tw, "CHAT\tTHREAD\tPID"+threadsCol+"\tSTATE\tTURN AGE\tTURNS\tRESTARTS\tQUEUED\tPSS\tIDLE\tACTIVITY")
	for _, c := range rows {
		turnAge, idle := "-", "-"
		if c.State == supervisor.StateBusy {
			turnAge = ShortDuration(c.TurnAge)
		} else if !c.LastActivity.IsZero() {
			idle = ShortDuration(now.Sub(c.LastActivity))
		}
		chat := c.ChatKey
		if c.State == supervisor.StateSpare || (chat == "" && c.State == supervisor.StateStarting) {
			chat = "(spare)"
		}
		activity := c.ActivityLine(now)
		if activity == "" {
			activity = "-"
		}
		pid := fmt.Sprint(c.PID)
		if shared {
			pid += fmt.Sprintf("\t%d", c.Threads)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n",
			chat, shortID(c.ThreadID), pid, c.State, turnAge, c.Turns, c.Restarts, c.Queued, HumanBytes(c.PSSBytes), idle, activity)
	}
	tw.Flush()
	if len(rows) == 0 {
		fmt.Fprintln(w, "(no live codex children)")
	}
}

// renderTotals writes the pool's totals and its memory.
func renderTotals(w io.Writer, doc StatusDoc) {
	t := doc.Snapshot.Totals
	// The pool's counters start again with each image; the TURNS column is carried across.
	since := "start"
	if doc.Daemon.Reloads > 0 {
		since = "reload"
	}
	fmt.Fprintf(w, "\nlive %d/%d  busy %d  spares %d  queued %d  turns %d since %s  overload retries %d",
		t.Live, t.Cap, t.Busy, t.Spares, t.Queued, t.Turns, since, t.OverloadRetries)
	if t.ThreadsPerChild > 1 {
		fmt.Fprintf(w, "  children %d (up to %d threads each)", t.Children, t.ThreadsPerChild)
	}
	if len(t.Retired) > 0 {
		reasons := make([]string, 0, len(t.Retired))
		for r, n := range t.Retired {
			reasons = append(reasons, fmt.Sprintf("%s=%d", r, n))
		}
		sort.Strings(reasons)
		fmt.Fprintf(w, "  retired %s", strings.Join(reasons, " "))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "memory: children pss %s (private %s, rss %s), daemon pss %s",
		HumanBytes(t.PSSBytes), HumanBytes(t.USSBytes), HumanBytes(t.RSSBytes), HumanBytes(doc.Daemon.PSSBytes))
	// The budget's own figures: what it counts as used (the sampler's PSS readings, plus the
	// estimate for children not measured yet) and what it expects a new child to cost.
	if t.MemoryBudgetBytes > 0 {
		fmt.Fprintf(w, "; budget %s, used %s (measured %s), new child ~%s\n",
			HumanBytes(t.MemoryBudgetBytes), HumanBytes(t.ChargedBytes), HumanBytes(t.MeasuredPSSBytes), HumanBytes(t.ChildEstimateBytes))
	} else {
		fmt.Fprintln(w, "; no memory budget")
	}
}

// renderSections writes the sections parts added to the document, one line each: its title,
// then its rows as "label value".
func renderSections(w io.Writer, sections []StatusSection) {
	for _, s := range sections {
		fmt.Fprintf(w, "%s:", s.Title)
		for _, r := range s.Rows {
			fmt.Fprintf(w, "  %s %s", r.Label, r.Value)
		}
		fmt.Fprintln(w)
	}
}

// shortID keeps thread ids readable in a table; --json has them whole.
func shortID(id string) string {
	if id == "" {
		return "-"
	}
	if len(id) > 13 {
		return id[:13] + "…"
	}
	return id
}

// ShortDuration is d as status shows it: "850ms", "4.2s", "3m07s", "2h05m".
func ShortDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	default:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
}

// HumanBytes is n as status shows it: "512K", "300M", "1.5G"; "-" for none.
func HumanBytes(n int64) string {
	switch {
	case n <= 0:
		return "-"
	case n < 1<<20:
		return fmt.Sprintf("%dK", n>>10)
	case n < 1<<30:
		return fmt.Sprintf("%dM", n>>20)
	default:
		return fmt.Sprintf("%.1fG", float64(n)/(1<<30))
	}
}
