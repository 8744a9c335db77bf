package molecule

import (
	"testing"

	"github.com/molecule-ai/codex-warm/internal/fieldowner"
)

// Each part of the inbox keeps its state to itself: its fields are written only by its own
// methods and constructors, and the others reach it through its methods. Inbox only composes
// the parts. The delivery ledger is a package of its own (ledger): Go's visibility keeps its
// fields to it.
func TestPartsOwnTheirFields(t *testing.T) {
	fieldowner.CheckReceivers(t, ".", map[string]fieldowner.Access{
		"Inbox":     fieldowner.Writes,
		"feed":      fieldowner.Writes,
		"answerer":  fieldowner.Writes,
		"replies":   fieldowner.Writes,
		"turnView":  fieldowner.Writes,
		"workspace": fieldowner.Writes,
		// What the parts share, each with its own lock.
		"answerWindow":    fieldowner.Writes,
		"stateWriter":     fieldowner.Writes,
		"outages":         fieldowner.Writes,
		"tenancyLog":      fieldowner.Writes,
		"pauseGate":       fieldowner.Writes,
		"peerExchanges":   fieldowner.Writes,
		"dispatcher":      fieldowner.Writes,
		"waits":           fieldowner.Writes,
		"delegationWatch": fieldowner.Writes,
	})
}

// No type calls another type's …Locked method: each part's lock is its own.
func TestNoCrossTypeLockedCalls(t *testing.T) {
	fieldowner.NoCrossLocked(t, ".")
}

// Inbox stays small: New, Run, the exported API and the routing of a job between the parts.
func TestInboxStaysSmall(t *testing.T) {
	fieldowner.AtMost(t, ".", "Inbox", 25)
}
