package control

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/molecule"
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
			PersistErrors: 15, Recovered: 16, Cursor: "act-99", Unacked: 17, PendingReplies: 18, InFlight: 19,
			Refused: "the platform refuses this workspace: check MOLECULE_ORG_ID"},
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
	Render(&b, got, now)
	out := b.String()
	for _, want := range []string{
		"molecule: received 12  answered 11  delivered 9  delivery retries 4  delivery failures 2  pending replies 18  unacked 17  in flight 19",
		"codex failures 1  poison 3  duplicates 5  busy retries 6  unreachable retries 7  parked 0 (too long 0)  commands 8  recovered 16",
		"poll errors 13  heartbeat errors 14  state write errors 15  cursor act-99",
		"WARNING: not ready: the platform refuses this workspace: check MOLECULE_ORG_ID",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}

	// The local inbox has no such counters: no molecule lines.
	doc.Bridge, doc.Daemon.Inbox = nil, "local"
	b.Reset()
	Render(&b, doc, now)
	if strings.Contains(b.String(), "molecule:") {
		t.Errorf("local inbox status shows molecule counters:\n%s", b.String())
	}
}

func TestRenderStatusTable(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	doc := StatusDoc{
		Daemon: DaemonInfo{PID: 42, Version: "v1", Started: now.Add(-90 * time.Second), Inbox: "local", Listen: "127.0.0.1:1", StateDir: "/s",
			RSSBytes: 12 << 20, PSSBytes: 9 << 20},
		Snapshot: supervisor.Snapshot{
			Children: []supervisor.ChildStatus{
				{ChatKey: "peer:b", ThreadID: "01a1fd80-b525-7b83-b606-b61215897848", PID: 7, State: supervisor.StateIdle, Turns: 3, LastActivity: now.Add(-2 * time.Minute), RSSBytes: 150 << 20, PSSBytes: 53 << 20, USSBytes: 25 << 20},
				{ChatKey: "canvas:a", ThreadID: "t2", PID: 8, State: supervisor.StateBusy, TurnAge: 1500 * time.Millisecond, Turns: 1, Restarts: 1,
					Activity: `running "npm test"`, ActivitySince: now.Add(-130 * time.Second)},
				{ThreadID: "t3", PID: 9, State: supervisor.StateSpare, LastActivity: now.Add(-time.Minute)},
			},
			Totals: supervisor.Totals{Live: 3, Busy: 1, Spares: 1, Cap: 4, Turns: 4, Retired: map[string]int{"idle": 2, "child_died": 1},
				OverloadRetries: 3, RSSBytes: 150 << 20, PSSBytes: 53 << 20, USSBytes: 25 << 20,
				MemoryBudgetBytes: 4 << 30, ChargedBytes: 106 << 20, MeasuredPSSBytes: 53 << 20, ChildEstimateBytes: 53 << 20},
		},
	}
	if j, err := json.Marshal(doc); err != nil || !bytes.Contains(j, []byte(`"overload_retries":3`)) {
		t.Errorf("status --json lacks overload_retries (%v): %s", err, j)
	}
	var b bytes.Buffer
	Render(&b, doc, now)
	out := b.String()
	lines := strings.Split(out, "\n")
	var header, rowA, rowB, rowSpare string
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "(spare)"):
			rowSpare = l
		case strings.HasPrefix(l, "CHAT"):
			header = l
		case strings.HasPrefix(l, "canvas:a"):
			rowA = l
		case strings.HasPrefix(l, "peer:b"):
			rowB = l
		}
	}
	if header == "" || rowA == "" || rowB == "" || !strings.Contains(rowSpare, " spare ") {
		t.Fatalf("missing header or rows:\n%s", out)
	}
	// Sorted by chat key, columns aligned: PID starts at the same offset in every line.
	if strings.Index(out, "canvas:a") > strings.Index(out, "peer:b") {
		t.Errorf("rows not sorted by chat key:\n%s", out)
	}
	// Columns are counted in runes: the shortened thread id ends in a multi-byte "…".
	col := strings.Index(header, "PID")
	if !strings.HasPrefix(string([]rune(rowA)[col:]), "8 ") || !strings.HasPrefix(string([]rune(rowB)[col:]), "7 ") {
		t.Errorf("PID column not aligned:\n%s", out)
	}
	// The memory column is PSS: RSS would count the codex binary's shared pages once per child.
	if mem := strings.Index(header, "PSS"); mem < 0 || strings.Contains(header, "RSS") ||
		!strings.HasPrefix(string([]rune(rowB)[mem:]), "53M ") {
		t.Errorf("memory column is not PSS:\n%s", out)
	}
	if act := strings.Index(header, "ACTIVITY"); act < 0 || !strings.HasPrefix(string([]rune(rowA)[act:]), `running "npm test" (2m10s)`) ||
		!strings.HasPrefix(string([]rune(rowB)[act:]), "-") {
		t.Errorf("activity column wrong:\n%s", out)
	}
	for _, want := range []string{"01a1fd80-b525…", "busy", "1.5s", "2m00s", "live 3/4  busy 1  spares 1", "overload retries 3", "retired child_died=1 idle=2", "up 1m30s",
		"memory: children pss 53M (private 25M, rss 150M), daemon pss 9M; budget 4.0G, used 106M (measured 53M), new child ~53M\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, fmt.Sprintf("turns %d since start", doc.Snapshot.Totals.Turns)) {
		t.Errorf("status output lacks the turns since start:\n%s", out)
	}
	doc.Snapshot.Totals.MemoryBudgetBytes = 0
	doc.Daemon.Reloads = 2 // the pool's counters start again with each image
	b.Reset()
	Render(&b, doc, now)
	if want := "daemon pss 9M; no memory budget\n"; !strings.Contains(b.String(), want) {
		t.Errorf("status output without a budget lacks %q:\n%s", want, b.String())
	}
	if !strings.Contains(b.String(), fmt.Sprintf("turns %d since reload", doc.Snapshot.Totals.Turns)) {
		t.Errorf("status output after reloads lacks the turns since reload:\n%s", b.String())
	}
}

// The status header shows codex's version and login state, and a warning line while codex is
// not logged in; nothing about codex when the daemon did not report it.
func TestRenderStatusCodexLogin(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		auth      *CodexAuth
		want, not []string
	}{
		{auth: nil, not: []string{"codex ", "WARNING"}},
		{auth: &CodexAuth{State: CodexLoggedIn, Account: "chatgpt", Checked: now.Add(-3 * time.Second)},
			want: []string{"codex 9.8.7  login ok (chatgpt), checked 3.0s ago"}, not: []string{"WARNING"}},
		{auth: &CodexAuth{State: CodexNotLoggedIn, RequiresOpenAIAuth: true, Checked: now},
			want: []string{"codex 9.8.7  login not_logged_in", "WARNING: codex is not logged in", "`codex login`"}},
	} {
		doc := StatusDoc{Daemon: DaemonInfo{PID: 1, Version: "v", Started: now, Inbox: "local", StateDir: "/s",
			CodexVersion: "9.8.7", CodexAuth: tc.auth}}
		var b bytes.Buffer
		Render(&b, doc, now)
		header, _, _ := strings.Cut(b.String(), "CHAT")
		for _, w := range tc.want {
			if !strings.Contains(header, w) {
				t.Errorf("auth %+v: header lacks %q:\n%s", tc.auth, w, header)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(header, n) {
				t.Errorf("auth %+v: header has %q:\n%s", tc.auth, n, header)
			}
		}
	}
}

// With shared children the table says how many threads share each row's child, and the totals
// count the processes.
func TestRenderStatusSharedChildren(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	doc := StatusDoc{
		Daemon: DaemonInfo{PID: 42, Version: "v1", Started: now.Add(-time.Minute), Inbox: "local", StateDir: "/s"},
		Snapshot: supervisor.Snapshot{
			Children: []supervisor.ChildStatus{
				{ChatKey: "a", ThreadID: "t-a", PID: 7, State: supervisor.StateIdle, Threads: 2},
				{ChatKey: "b", ThreadID: "t-b", PID: 7, State: supervisor.StateIdle, Threads: 2},
			},
			Totals: supervisor.Totals{Cap: 4, Live: 2, Children: 1, ThreadsPerChild: 8},
		},
	}
	var b bytes.Buffer
	Render(&b, doc, now)
	out := b.String()
	for _, want := range []string{"PID  THREADS  STATE", "children 1 (up to 8 threads each)"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
	doc.Snapshot.Totals.ThreadsPerChild = 1
	b.Reset()
	Render(&b, doc, now)
	if strings.Contains(b.String(), "THREADS") || strings.Contains(b.String(), "children 1") {
		t.Errorf("one thread per child shows shared columns:\n%s", b.String())
	}
}
