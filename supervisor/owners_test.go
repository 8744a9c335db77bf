package supervisor

import (
	"testing"

	"github.com/molecule-ai/codex-warm/internal/fieldowner"
)

// The supervisor is one state table and the parts that do the slow work around it (the shape
// and the lock rule are at the top of supervisor.go). Parts in packages of their own (account,
// hosts, progress) keep their state by Go's visibility; in this package each part's fields are
// written only by its own methods and constructors, whatever file they are in.
func TestPartsOwnTheirState(t *testing.T) {
	fieldowner.CheckReceivers(t, ".", map[string]fieldowner.Access{
		// The state table's lock: nothing but its own methods reaches the table around do.
		"stateTable": fieldowner.Uses,
		// The state table: keys, sessions, slots, queues, the freeze; every transition is its method.
		"table":        fieldowner.Writes,
		"freeze":       fieldowner.Writes, // the handover's state in the table
		"spareState":   fieldowner.Writes, // the spares' signal and backoff
		"crashStreak":  fieldowner.Writes,
		"crashBackoff": fieldowner.Writes, // a chat's (or the spares') restart backoff
		// The slow work, each with its own fields.
		"pool":         fieldowner.Writes, // spawning, slots' waits, spares' keeper, memory, records, watchers
		"spareKeeper":  fieldowner.Writes,
		"childRecords": fieldowner.Writes, // children.json's extra rows and its writes' order
		"chats":        fieldowner.Writes, // a message's way, turns, the chat's commands, compaction
		"handover":     fieldowner.Writes, // Freeze, Thaw, adoption
		// Parts with their own locks.
		"archiver":   fieldowner.Writes, // the retention sweep, leaving and returning threads
		"liveTurn":   fieldowner.Writes, // a running turn, which messages can be steered into
		"Supervisor": fieldowner.Writes,
	})
}

// No type calls another type's …Locked method: a type's lock is its own (the state table's
// transitions need no such suffix, since a *table is only had inside stateTable.do).
func TestNoCrossTypeLockedCalls(t *testing.T) {
	fieldowner.NoCrossLocked(t, ".")
}

// maxSupervisorMethods is what Supervisor may carry (methods, and functions taking it). It only
// goes down: a new method belongs in one of the parts. They are the API the daemon, the inboxes
// and control call, each delegating to a part.
const maxSupervisorMethods = 26

func TestSupervisorStaysSmall(t *testing.T) {
	fieldowner.AtMost(t, ".", "Supervisor", maxSupervisorMethods)
}
