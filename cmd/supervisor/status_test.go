package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/inbox/molecule"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// The text status of a daemon on the Molecule inbox shows the inbox's delivery counters, which
// were only in --json and the metrics: an operator reading `supervisor status` sees replies
// waiting for the platform, retries and rows not yet acknowledged. The document goes through
// JSON as it does between the daemon and the status command.
func TestRenderStatusMoleculeCounters(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	doc := StatusDoc{
		Daemon: DaemonInfo{PID: 42, Version: "v1", Started: now.Add(-time.Minute), Inbox: "molecule", StateDir: "/s"},
		Bridge: &molecule.Stats{Received: 12, Answered: 11, CodexFailures: 1, Delivered: 9, DeliveryRetries: 4, DeliveryFailed: 2,
			Poison: 3, Duplicates: 5, BusyRetries: 6, UnreachableRetries: 7, Commands: 8, PollErrors: 13, HeartbeatErrors: 14,
			PersistErrors: 15, Recovered: 16, Cursor: "act-99", Unacked: 17, PendingReplies: 18, InFlight: 19},
		Snapshot: supervisor.Snapshot{Totals: supervisor.Totals{Cap: 4}},
	}
	wire, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var got StatusDoc
	if err := json.Unmarshal(wire, &got); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	renderStatus(&b, got, now)
	out := b.String()
	for _, want := range []string{
		"molecule: received 12  answered 11  delivered 9  delivery retries 4  delivery failures 2  pending replies 18  unacked 17  in flight 19",
		"codex failures 1  poison 3  duplicates 5  busy retries 6  unreachable retries 7  commands 8  recovered 16",
		"poll errors 13  heartbeat errors 14  state write errors 15  cursor act-99",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}

	// The local inbox has no such counters: no molecule lines.
	doc.Bridge, doc.Daemon.Inbox = nil, "local"
	b.Reset()
	renderStatus(&b, doc, now)
	if strings.Contains(b.String(), "molecule:") {
		t.Errorf("local inbox status shows molecule counters:\n%s", b.String())
	}
}
