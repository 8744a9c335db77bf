package control

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/supervisor"
)

// A part adds its own status line and its own readiness cause through the document alone: they
// cross the wire as JSON and Render prints them where they belong, and a document without them
// renders as before.
func TestRenderPrintsWhatPartsAdd(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	doc := StatusDoc{
		Daemon:   DaemonInfo{PID: 42, Version: "v1", Started: now.Add(-time.Minute), Inbox: "local", StateDir: "/s"},
		Snapshot: supervisor.Snapshot{Totals: supervisor.Totals{Cap: 4}},
	}
	var before bytes.Buffer
	Render(&before, doc, now)

	doc.NotReady = []NotReadyCause{{Part: "reload", Text: "the new image is starting"}}
	doc.Sections = []StatusSection{{Title: "reload", Rows: []StatusRow{{Label: "attempts", Value: "2"}, {Label: "last", Value: "ok"}}}}
	wire, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var got StatusDoc
	if err := json.Unmarshal(wire, &got); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	Render(&b, got, now)
	out := b.String()
	warning := "WARNING: not ready (reload): the new image is starting\n"
	section := "reload:  attempts 2  last ok\n"
	if !strings.Contains(out, warning) || !strings.Contains(out, section) {
		t.Fatalf("status output lacks the part's lines %q and %q:\n%s", warning, section, out)
	}
	// The cause is a warning of the header, above the process table; the section comes after
	// the totals.
	if strings.Index(out, warning) > strings.Index(out, "CHAT") || strings.Index(out, section) < strings.Index(out, "memory:") {
		t.Errorf("the part's lines are out of place:\n%s", out)
	}
	if strings.Replace(strings.Replace(out, warning, "", 1), section, "", 1) != before.String() {
		t.Errorf("adding a part's lines changed the rest of the output:\nbefore:\n%s\nafter:\n%s", before.String(), out)
	}
}
