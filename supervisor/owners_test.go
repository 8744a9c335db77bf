package supervisor

import (
	"testing"

	"github.com/molecule-ai/codex-warm/internal/fieldowner"
)

// The supervisor is parts with owners (the lock order is at the top of supervisor.go). Parts in
// packages of their own (account, hosts) keep their state by Go's visibility; the parts in this
// package say here which files may touch their fields.
func TestPartsOwnTheirState(t *testing.T) {
	fieldowner.Check(t, ".", map[string][]string{
		"freeze":        {"handover.go"},  // the handover: a reload's freeze, paused children, handed turns
		"archiver":      {"retention.go"}, // the retention sweep, leaving and returning threads
		"approvalBoard": {"approval.go"},  // approvals waiting for a person
		"crashStreak":   {"crashstreak.go"},
		"crashBackoff":  {"restart.go"},                     // a chat's (or the spares') restart backoff
		"slots":         {"slots.go"},                       // the slots: cap, memory budget, waiters
		"spareState":    {"spares.go"},                      // the spares' keeper, signal and backoff
		"childRecords":  {"sweep.go"},                       // children.json's extra rows and its writes' order
		"turnWatch":     {"turnwatch.go", "modelsilent.go"}, // a turn's watchdogs
		// the children: sessions, slots, spares, memory, records, watchers, a session's opening
		"pool": {"pool.go", "session.go", "state.go", "slots.go", "spares.go", "warmup.go", "memory.go",
			"shared.go", "watcher.go", "sweep.go", "restart.go", "status.go"},
		// the chat path: keys, queues, busy policy, turns, the chat's controls, compaction
		"chats": {"key.go", "queue.go", "busy.go", "turn.go", "control.go", "compact.go", "activity.go", "chatjobs.go"},
	})
}

// maxSupervisorMethods is what Supervisor may carry (methods, and functions taking it). It only
// goes down: a new method belongs in one of the parts. 26 of them are the API the daemon, the
// inboxes and control call (most delegate to a part); the rest is the handover, which spans the
// pool and the chats.
const maxSupervisorMethods = 31

func TestSupervisorStaysSmall(t *testing.T) {
	fieldowner.AtMost(t, ".", "Supervisor", maxSupervisorMethods)
}
