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
)

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
