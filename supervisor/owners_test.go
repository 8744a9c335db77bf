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
	})
}

// maxSupervisorMethods is what Supervisor may carry (methods, and functions taking it). It only
// goes down: a new method belongs in one of the parts. The aim is 40 (26 of them the API the
// daemon and the inboxes call); the pool (sessions, slots, spares, memory) and the chat path
// (keys, queue, turn, busy policy) are not carved out yet.
const maxSupervisorMethods = 47

func TestSupervisorStaysSmall(t *testing.T) {
	fieldowner.AtMost(t, ".", "Supervisor", maxSupervisorMethods)
}
