package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Check is one line of the verdict.
type Check struct {
	Name   string
	Pass   bool
	Detail string
}

// AckViolation is a message the daemon acknowledged before the platform had accepted a reply
// for it: a message that could be lost by a crash.
type AckViolation struct {
	Message Message
	// Where names the acknowledgement: a platform ack, or the state a killed daemon left.
	Where string
	// Mark is the call-log index the reply had to precede; FirstReply is where it came (-1:
	// never).
	Mark, FirstReply int
}

func (v AckViolation) String() string {
	return fmt.Sprintf("%s-%d (activity %s, seq %d) acknowledged by %s before call #%d, first reply at %d",
		v.Message.Label, v.Message.Index, v.Message.ActivityID, v.Message.Seq, v.Where, v.Mark, v.FirstReply)
}

// activityNumber orders the fake platform's row ids ("act-<n>", assigned in feed order).
func activityNumber(id string) (int, bool) {
	n, err := strconv.Atoi(strings.TrimPrefix(id, "act-"))
	return n, err == nil && strings.HasPrefix(id, "act-")
}

// AckViolations checks every acknowledgement the soak can see against the replies: each acked_seq
// the platform's mailbox received, and the cursor, acked_seq and done list each killed daemon
// left on disk (and the final state after SIGTERM, whose mark is the end of the call log). Every
// message covered by one of them must have had its first reply accepted before it.
func AckViolations(a *Accounting, acks []Ack, kills []Kill, final *BridgeState, finalMark int) []AckViolation {
	var out []AckViolation
	for _, ack := range acks {
		for _, r := range a.bySeq {
			if r.Message.Seq <= 0 || r.Message.Seq > ack.Seq {
				continue
			}
			if f := r.FirstOrder(); f < 0 || f > ack.Order {
				out = append(out, AckViolation{Message: r.Message, Where: fmt.Sprintf("platform ack acked_seq=%d", ack.Seq), Mark: ack.Order, FirstReply: f})
			}
		}
	}
	check := func(st BridgeState, mark int, where string) {
		cursor, hasCursor := activityNumber(st.Cursor)
		for _, r := range a.Results {
			m := r.Message
			n, ok := activityNumber(m.ActivityID)
			acked := (hasCursor && ok && n <= cursor) || (m.Seq > 0 && m.Seq <= st.AckedSeq) || slices.Contains(st.Done, m.ActivityID)
			if !acked {
				continue
			}
			if f := r.FirstOrder(); f < 0 || f >= mark {
				out = append(out, AckViolation{Message: m, Where: where, Mark: mark, FirstReply: f})
			}
		}
	}
	for i, k := range kills {
		check(k.State, k.Boundary, fmt.Sprintf("state left by daemon kill #%d", i+1))
	}
	if final != nil {
		check(*final, finalMark, "final state")
	}
	return out
}

// Unfinished lists the messages the final state does not have behind its cursor or in its done
// list, and the replies it still holds: after a clean stop with all traffic drained there should
// be none.
func Unfinished(a *Accounting, final BridgeState) (msgs []Message, pending int) {
	cursor, hasCursor := activityNumber(final.Cursor)
	for _, r := range a.Results {
		m := r.Message
		n, ok := activityNumber(m.ActivityID)
		if (hasCursor && ok && n <= cursor) || slices.Contains(final.Done, m.ActivityID) {
			continue
		}
		msgs = append(msgs, m)
	}
	return msgs, len(final.Pending)
}

// ThreadChanges lists chats whose stored thread id changed between the sessions.json snapshots
// (one per kill, then the final one): the conversation was replaced by a new thread.
func ThreadChanges(snapshots []map[string]string) []string {
	seen := make(map[string]string)
	var out []string
	for _, snap := range snapshots {
		for chat, thread := range snap {
			if prev, ok := seen[chat]; ok && prev != thread {
				out = append(out, fmt.Sprintf("%s: %s → %s", chat, prev, thread))
			}
			seen[chat] = thread
		}
	}
	slices.Sort(out)
	return out
}

// MissingSessions lists chats that completed a turn but have no thread in sessions.json.
func MissingSessions(answers map[string]int, sessions map[string]string) []string {
	var out []string
	for chat, n := range answers {
		if n > 0 && sessions[chat] == "" {
			out = append(out, chat)
		}
	}
	slices.Sort(out)
	return out
}

// Sample is the daemon's own resource use as status --json reports it.
type Sample struct {
	Goroutines int
	RSSBytes   int64
	HeapBytes  uint64
}

// Tolerance is how far above the baseline the end sample may be.
type Tolerance struct {
	// Goroutines may exceed the baseline by this many (idle keep-alive connections come and go).
	Goroutines int
	// Heap may be HeapFactor × baseline or baseline + HeapSlack, whichever is larger: HeapAlloc
	// includes garbage not yet collected, so it swings up to GOGC's 2× between collections.
	HeapFactor float64
	HeapSlack  uint64
	// RSS may be RSSFactor × baseline or baseline + RSSSlack: the Go runtime returns memory to
	// the OS lazily.
	RSSFactor float64
	RSSSlack  int64
}

// defaultTolerance is the tolerance the soak reports against.
func defaultTolerance() Tolerance {
	return Tolerance{Goroutines: 5, HeapFactor: 2, HeapSlack: 16 << 20, RSSFactor: 2, RSSSlack: 64 << 20}
}

// Within reports whether end is back at base within t, and why not.
func (t Tolerance) Within(base, end Sample) (bool, []string) {
	var why []string
	if end.Goroutines > base.Goroutines+t.Goroutines {
		why = append(why, fmt.Sprintf("goroutines %d > %d+%d", end.Goroutines, base.Goroutines, t.Goroutines))
	}
	heapMax := max(uint64(float64(base.HeapBytes)*t.HeapFactor), base.HeapBytes+t.HeapSlack)
	if end.HeapBytes > heapMax {
		why = append(why, fmt.Sprintf("heap %s > %s", mib(int64(end.HeapBytes)), mib(int64(heapMax))))
	}
	rssMax := max(int64(float64(base.RSSBytes)*t.RSSFactor), base.RSSBytes+t.RSSSlack)
	if end.RSSBytes > rssMax {
		why = append(why, fmt.Sprintf("rss %s > %s", mib(end.RSSBytes), mib(rssMax)))
	}
	return len(why) == 0, why
}

func (t Tolerance) String() string {
	return fmt.Sprintf("goroutines ≤ base+%d, heap ≤ max(%.0f×base, base+%s), rss ≤ max(%.0f×base, base+%s)",
		t.Goroutines, t.HeapFactor, mib(int64(t.HeapSlack)), t.RSSFactor, mib(t.RSSSlack))
}

func mib(b int64) string { return fmt.Sprintf("%.1fMiB", float64(b)/(1<<20)) }
