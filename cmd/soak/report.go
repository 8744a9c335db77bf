package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// maxListed caps the examples a failed check lists.
const maxListed = 8

// verdict turns an outcome into the checks. A check that could not run (the soak stopped
// before it) fails.
func verdict(o *outcome) []Check {
	var cs []Check
	add := func(name string, pass bool, detail string, extra []string) {
		if len(extra) > 0 {
			if len(extra) > maxListed {
				extra = append(extra[:maxListed:maxListed], fmt.Sprintf("… and %d more", len(extra)-maxListed))
			}
			detail += "\n    " + strings.Join(extra, "\n    ")
		}
		cs = append(cs, Check{Name: name, Pass: pass, Detail: detail})
	}
	if o.fatal != nil {
		add("soak ran to the end", false, o.fatal.Error(), nil)
	}
	a := o.acct
	if a == nil {
		return cs
	}

	// Exactly one reply per message.
	var bad []string
	for _, m := range a.Lost() {
		bad = append(bad, fmt.Sprintf("lost: %s-%d (%s, activity %s)", m.Label, m.Index, m.ChatKey, m.ActivityID))
	}
	for _, r := range a.Duplicated() {
		bad = append(bad, fmt.Sprintf("answered %d times: %s-%d: %s", len(r.Replies), r.Message.Label, r.Message.Index, quoteReplies(r.Replies)))
	}
	for _, r := range a.Extra {
		bad = append(bad, fmt.Sprintf("reply for no message on %s (call #%d): %q", r.ChatKey, r.Order, excerpt(r.Text)))
	}
	for _, r := range a.Misrouted {
		bad = append(bad, fmt.Sprintf("misrouted to %s (call #%d): %q", r.ChatKey, r.Order, excerpt(r.Text)))
	}
	answers, errorsN := 0, 0
	kinds := map[string]int{}
	var unusual []string
	for _, r := range a.Results {
		if len(r.Replies) == 0 {
			continue
		}
		text := r.Replies[0].Text
		if _, _, ok := parseToken(text); ok {
			answers++
			continue
		}
		errorsN++
		k := errorKind(text)
		kinds[k]++
		if k == "error" || k == "other" {
			// Not a failure of the check, but worth reading: a reply the soak did not expect.
			unusual = append(unusual, fmt.Sprintf("note: %s-%d got %q", r.Message.Label, r.Message.Index, strings.ReplaceAll(text, "\n", " ")))
		}
	}
	add("every message got exactly one reply", len(bad) == 0,
		fmt.Sprintf("%d messages: %d answered, %d visible error replies (%s), %d lost",
			len(o.msgs), answers, errorsN, formatKinds(kinds), len(a.Lost())), append(bad, unusual...))

	// No acknowledgement without a delivered reply.
	bad = nil
	for _, v := range o.ackViol {
		bad = append(bad, v.String())
	}
	for _, m := range o.unfinish {
		bad = append(bad, fmt.Sprintf("not finished in the final state: %s-%d (activity %s)", m.Label, m.Index, m.ActivityID))
	}
	if o.pending > 0 {
		bad = append(bad, fmt.Sprintf("%d replies still pending in the final state", o.pending))
	}
	add("no message acknowledged without a delivered reply", len(bad) == 0,
		fmt.Sprintf("%d platform acks, %d kill-time states and the final state checked", len(o.log.Acks), len(o.kills)), bad)

	// Duplicates.
	bad = nil
	var inWin []string
	for _, d := range a.Redeliveries {
		s := fmt.Sprintf("%s call #%d re-delivers call #%d (%q)", d.Reply.ChatKey, d.Reply.Order, d.Original.Order, excerpt(d.Reply.Text))
		switch {
		case d.InWindow:
			inWin = append(inWin, fmt.Sprintf("%s: daemon kill #%d came %s after the accept, reply still pending on disk",
				s, d.Kill+1, d.SinceAccept.Round(10*time.Microsecond)))
		case d.Kill >= 0:
			bad = append(bad, fmt.Sprintf("%s: kill #%d was %s after the accept but the state had it delivered",
				s, d.Kill+1, d.SinceAccept.Round(10*time.Microsecond)))
		default:
			bad = append(bad, s+": no daemon kill in between")
		}
	}
	dupDetail := fmt.Sprintf("%d duplicates, %d of them re-deliveries in a kill window (at-least-once)", a.Duplicates(), a.InWindow())
	add("no duplicate reply outside a kill window", len(bad) == 0 && len(a.Duplicated()) == 0 && len(a.Extra) == 0,
		dupDetail, append(bad, inWin...))

	// Processes.
	bad = nil
	for _, p := range o.leftovers {
		bad = append(bad, p.String())
	}
	detail := fmt.Sprintf("%d left", len(o.leftovers))
	if o.fatal != nil {
		detail = fmt.Sprintf("not reached (the soak stopped early); the teardown swept %d", len(o.leftovers))
	}
	add("no codex process left after SIGTERM", len(bad) == 0 && o.fatal == nil, detail, bad)

	// Sessions.
	bad = nil
	for _, r := range a.Regressions {
		bad = append(bad, fmt.Sprintf("%s: history went from #%d to #%d at call #%d", r.ChatKey, r.Prev, r.Next, r.Reply.Order))
	}
	for _, c := range o.threadChanges {
		bad = append(bad, "thread replaced: "+c)
	}
	for _, c := range o.missingSessions {
		bad = append(bad, "no thread in sessions.json for "+c)
	}
	add("no session lost across restarts", len(bad) == 0,
		fmt.Sprintf("%d chats answered, history grew in each; %d sessions.json snapshots", len(a.Answers), len(o.kills)+1), bad)

	// Resources.
	tol := defaultTolerance()
	ok, why := tol.Within(o.base, o.end)
	switch {
	case !o.baseOK:
		why = append(why, "no baseline sample")
	case o.end == (Sample{}):
		why = append(why, "no end sample")
	case !o.endOK:
		why = append(why, "the end sample was taken before the daemon was idle with no children")
	}
	add("daemon back to baseline goroutines and memory", o.baseOK && o.endOK && ok,
		fmt.Sprintf("goroutines %d→%d, heap %s→%s, rss %s→%s; tolerance %s; the end daemon had received %d messages",
			o.base.Goroutines, o.end.Goroutines, mib(int64(o.base.HeapBytes)), mib(int64(o.end.HeapBytes)),
			mib(o.base.RSSBytes), mib(o.end.RSSBytes), tol, o.lastDaemonMsgs), why)

	// Daemon lifecycle.
	bad = append([]string(nil), o.unexpected...)
	if o.termErr != nil {
		bad = append(bad, "SIGTERM: "+o.termErr.Error())
	}
	if o.fatal != nil {
		bad = append(bad, "SIGTERM not reached (the soak stopped early)")
	}
	add("daemon restarts cleanly and stops on SIGTERM", len(bad) == 0 && o.fatal == nil,
		fmt.Sprintf("%d starts, %d kills, SIGTERM exit in %s", o.daemonStarts, len(o.kills), o.termTook.Round(time.Millisecond)), bad)
	return cs
}

// errorKind names the kind of a visible error reply from the bridge's reply texts.
func errorKind(text string) string {
	for _, k := range []struct{ prefix, kind string }{
		{"codex was interrupted", "interrupted"},
		{"codex failed (status failed)", "turn-failed"},
		{"the codex session stopped responding (", "watchdog"},
		{"codex keeps failing", "crash-backoff"},
		{"codex is busy", "busy"},
		{"the codex daemon is shutting down", "shutting-down"},
		{"codex could not answer", "error"},
	} {
		if !strings.HasPrefix(text, k.prefix) {
			continue
		}
		if k.kind == "watchdog" {
			// "... stopped responding (<watchdog name>) ..."
			if name, _, ok := strings.Cut(text[len(k.prefix):], ")"); ok {
				return "watchdog " + name
			}
		}
		return k.kind
	}
	return "other"
}

func formatKinds(kinds map[string]int) string {
	if len(kinds) == 0 {
		return "none"
	}
	names := make([]string, 0, len(kinds))
	for k := range kinds {
		names = append(names, k)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s %d", k, kinds[k])
	}
	return strings.Join(parts, ", ")
}

func excerpt(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 200 {
		return strings.ToValidUTF8(s[:200], "") + "…"
	}
	return s
}

func quoteReplies(rs []Reply) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("#%d %q", r.Order, excerpt(r.Text))
	}
	return strings.Join(parts, ", ")
}

// passed says whether every check passed.
func passed(cs []Check) bool {
	for _, c := range cs {
		if !c.Pass {
			return false
		}
	}
	return len(cs) > 0
}

// printReport writes the table of checks and, as the last lines, the name=value summary.
func printReport(w io.Writer, o *outcome, cs []Check) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tRESULT\tDETAIL")
	var details []string
	for _, c := range cs {
		res := "PASS"
		if !c.Pass {
			res = "FAIL"
		}
		first, rest, _ := strings.Cut(c.Detail, "\n")
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Name, res, first)
		if rest != "" {
			details = append(details, fmt.Sprintf("%s (%s):\n%s", c.Name, res, rest))
		}
	}
	tw.Flush()
	for _, d := range details {
		fmt.Fprintf(w, "\n%s\n", d)
	}
	fmt.Fprintln(w)

	result := "FAIL"
	if passed(cs) {
		result = "PASS"
	}
	kv := func(k string, v any) { fmt.Fprintf(w, "%s=%v\n", k, v) }
	var dups, inWin, lost, replies, errReplies int
	if o.acct != nil {
		dups, inWin, lost = o.acct.Duplicates(), o.acct.InWindow(), len(o.acct.Lost())
		for _, r := range o.acct.Results {
			if len(r.Replies) > 0 {
				if _, _, ok := parseToken(r.Replies[0].Text); !ok {
					errReplies++
				}
			}
		}
	}
	replies = len(o.log.Replies)
	kv("seed", o.cfg.Seed)
	kv("size", o.cfg.Size)
	kv("elapsed_s", fmt.Sprintf("%.1f", o.elapsed.Seconds()))
	kv("chats", o.cfg.Chats)
	kv("messages", len(o.msgs))
	kv("replies", replies)
	kv("error_replies", errReplies)
	kv("duplicates", dups)
	kv("duplicates_in_kill_window", inWin)
	kv("lost", lost)
	kv("daemon_kills", len(o.kills))
	kv("child_kills", o.childKills)
	kv("platform_failures", o.log.Failures)
	kv("platform_hangs", o.log.Hangs)
	kv("cursor_gone", o.log.Gone)
	kv("model_faults", o.modelHangs+o.modelFails)
	kv("model_hangs", o.modelHangs)
	kv("model_fails", o.modelFails)
	kv("ack_violations", len(o.ackViol))
	kv("codex_left", len(o.leftovers))
	kv("goroutines_baseline", o.base.Goroutines)
	kv("goroutines_end", o.end.Goroutines)
	kv("heap_baseline_kb", o.base.HeapBytes>>10)
	kv("heap_end_kb", o.end.HeapBytes>>10)
	kv("rss_baseline_kb", o.base.RSSBytes>>10)
	kv("rss_end_kb", o.end.RSSBytes>>10)
	kv("result", result)
}
