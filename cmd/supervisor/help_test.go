package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// `supervisor <command> -h` is a request for help, not a usage error: it exits 0 and says what
// the command does before listing its flags.
func TestCommandHelpExitsZero(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cmd, says, flag string
	}{
		{"run", "Runs the daemon", "-codex-bin"},
		{"status", "live process table", "-state-dir"},
		{"demo", "offline demo", "-model-latency"},
		{"doctor", "Checks what `supervisor run` would use", "-codex-bin"},
		{"mock-model", "mock model", "-listen"},
		{"reload", "binary now on disk", "-wait"},
		{"stop", "as SIGTERM does", "-wait"},
		{"archive", "retention sweep once", "-idle-after"},
	} {
		for _, h := range []string{"-h", "--help"} {
			var out, errOut bytes.Buffer
			code := runMain(context.Background(), []string{tc.cmd, h}, noEnv, &out, &errOut)
			help := out.String() + errOut.String()
			if code != 0 {
				t.Errorf("%s %s: exit %d, want 0; output:\n%s", tc.cmd, h, code, help)
			}
			if !strings.Contains(help, "usage: supervisor "+tc.cmd) || !strings.Contains(help, tc.says) || !strings.Contains(help, tc.flag) {
				t.Errorf("%s %s: help lacks the usage line, %q or flag %s:\n%s", tc.cmd, h, tc.says, tc.flag, help)
			}
		}
	}
	// A real usage error still exits 2.
	var out, errOut bytes.Buffer
	if code := runMain(context.Background(), []string{"status", "--no-such-flag"}, noEnv, &out, &errOut); code != 2 {
		t.Errorf("status --no-such-flag: exit %d, want 2", code)
	}
}
