package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
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
		"codex failures 1  poison 3  duplicates 5  busy retries 6  unreachable retries 7  parked 0 (too long 0)  commands 8  recovered 16",
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

// `supervisor status` has one exit-code convention (docs/operating.md, "supervisor status"): 3 when no
// daemon can be running on the state directory (no socket, a stale one, a path that is not a
// directory or too long for a socket), 4 when something answers but not as the daemon does, each
// with a sentence on stderr naming the state dir. With --json, stdout is JSON in every case: an
// error object with the same exit code.
func TestStatusExitCodes(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	notDir := filepath.Join(base, "a-file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(base, "stale")
	if err := os.Mkdir(stale, 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(stale, controlSocketName))
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close() // the socket file stays, nobody listens: a daemon that was SIGKILLed
	stranger := filepath.Join(base, "stranger")
	if err := os.Mkdir(stranger, 0o700); err != nil {
		t.Fatal(err)
	}
	sln, err := net.Listen("unix", filepath.Join(stranger, controlSocketName))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "not the daemon", http.StatusInternalServerError)
	})}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(sln) }()
	t.Cleanup(func() { srv.Close(); <-served })

	for _, tc := range []struct {
		name, dir, reason, says string
		code                    int
	}{
		{"no state dir", filepath.Join(base, "missing"), "not_running", "no supervisor daemon is running", 3},
		{"no socket", base, "not_running", "no supervisor daemon is running", 3},
		{"stale socket", stale, "not_running", "no supervisor daemon is running", 3},
		{"not a directory", notDir, "not_running", "not a directory", 3},
		{"too long for a socket", filepath.Join(base, strings.Repeat("d", 120)), "not_running", "too long", 3},
		{"not the daemon", stranger, "unknown", "HTTP 500", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := runMain(context.Background(), []string{"status", "--state-dir", tc.dir}, noEnv, &out, &errOut)
			msg := errOut.String()
			if code != tc.code || !strings.HasPrefix(msg, "supervisor status: ") || !strings.Contains(msg, tc.says) ||
				!strings.Contains(msg, tc.dir) || strings.Count(msg, "\n") != 1 {
				t.Errorf("exit %d, stderr %q; want exit %d and one sentence saying %q, naming the state dir", code, msg, tc.code, tc.says)
			}

			out.Reset()
			errOut.Reset()
			code = runMain(context.Background(), []string{"status", "--json", "--state-dir", tc.dir}, noEnv, &out, &errOut)
			var doc struct {
				Error *struct {
					Reason   string `json:"reason"`
					Message  string `json:"message"`
					StateDir string `json:"state_dir"`
					ExitCode int    `json:"exit_code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(out.Bytes(), &doc); err != nil || doc.Error == nil {
				t.Fatalf("--json: exit %d, stdout %q is not an error object (%v); stderr %q", code, out.String(), err, errOut.String())
			}
			e := doc.Error
			if code != tc.code || e.ExitCode != tc.code || e.Reason != tc.reason || e.StateDir != tc.dir || !strings.Contains(e.Message, tc.says) {
				t.Errorf("--json: exit %d, error %+v; want exit %d, reason %s, message saying %q", code, *e, tc.code, tc.reason, tc.says)
			}
		})
	}
}
