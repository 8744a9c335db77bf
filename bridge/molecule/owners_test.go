package molecule

import (
	"testing"

	"github.com/molecule-ai/codex-warm/internal/fieldowner"
)

// Each part of the inbox keeps its state to itself: its fields are touched only from its own
// files, and the others reach it through its methods. Inbox only composes the parts. The
// delivery ledger is a package of its own (ledger): Go's visibility keeps its fields to it.
func TestPartsOwnTheirFields(t *testing.T) {
	fieldowner.Check(t, ".", map[string][]string{
		"Inbox":     {"molecule.go", "stats.go"},
		"feed":      {"feed.go", "stream.go"},
		"answerer":  {"moleculeanswer.go", "waiting.go", "newreset.go", "pingpong.go"},
		"replies":   {"replies.go", "outbound.go", "sendfiles.go", "uploads.go"},
		"turnView":  {"turnview.go", "progress.go", "chips.go", "approvals.go"},
		"workspace": {"register.go", "wsstate.go", "health.go", "session.go"},
		// What the parts share, each with its own lock.
		"answerWindow":    {"health.go"},
		"stateWriter":     {"statewrite.go"},
		"outages":         {"reach.go"},
		"tenancyLog":      {"tenancy.go"},
		"pauseGate":       {"wsstate.go"},
		"peerExchanges":   {"pingpong.go"},
		"dispatcher":      {"dispatcher.go"},
		"waits":           {"waiting.go"},
		"delegationWatch": {"delegationpoll.go"},
	})
}

// Inbox stays small: New, Run, the exported API and the routing of a job between the parts.
func TestInboxStaysSmall(t *testing.T) {
	fieldowner.AtMost(t, ".", "Inbox", 25)
}
