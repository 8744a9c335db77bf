package control

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/projector"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// The text status shows the account's usage windows, a warning while work is parked, and each
// chat's token totals; a snapshot without them (an older daemon) shows none of it.
func TestRenderStatusLimitsAndUsage(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.Local)
	doc := StatusDoc{
		Daemon: DaemonInfo{PID: 42, Version: "v1", Started: now.Add(-time.Minute), Inbox: "molecule", StateDir: "/s"},
		Snapshot: supervisor.Snapshot{Totals: supervisor.Totals{Cap: 4},
			Limits: supervisor.LimitStatus{Limited: true, ResetsAt: now.Add(2*time.Hour + 13*time.Minute), Parked: 3, Hits: 1,
				Primary:   &supervisor.LimitWindow{UsedPercent: 100, WindowMinutes: 300, ResetsAt: now.Add(2*time.Hour + 13*time.Minute)},
				Secondary: &supervisor.LimitWindow{UsedPercent: 41, WindowMinutes: 10080, ResetsAt: now.Add(100 * time.Hour)}},
			Usage: map[string]supervisor.ChatUsage{
				"canvas:ws": {Usage: projector.Usage{InputTokens: 120400, CachedInputTokens: 98000, OutputTokens: 5210, ReasoningOutputTokens: 1800}, Turns: 14, LastTurnAt: now.Add(-90 * time.Minute)},
				"peer:beta": {Usage: projector.Usage{InputTokens: 8100, OutputTokens: 640}, Turns: 2},
			}},
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
	Render(&b, got, now)
	out := b.String()
	for _, want := range []string{
		"WARNING: the account's usage limit is reached; 3 message(s) parked until 14:13 ",
		"(in 2h13m)",
		"usage limits:  primary 100% of 5h, resets 14:13 ",
		"secondary 41% of 7d, resets Wed Nov 25 16:00 ",
		"limit reached 1 time(s)",
		"CHAT       TURNS  INPUT   CACHED  OUTPUT  REASONING  LAST TURN",
		"canvas:ws  14     120400  98000   5210    1800       1h30m ago",
		"peer:beta  2      8100    0       640     0          -",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}

	doc.Snapshot.Limits, doc.Snapshot.Usage = supervisor.LimitStatus{}, nil
	b.Reset()
	Render(&b, doc, now)
	if s := b.String(); strings.Contains(s, "usage limit") || strings.Contains(s, "REASONING") {
		t.Errorf("status without limits or usage shows them:\n%s", s)
	}
}
