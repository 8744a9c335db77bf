package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/molecule-ai/codex-warm/internal/daemon"
	"github.com/molecule-ai/codex-warm/internal/demo"
)

// cmdDemo runs the offline demo (package demo) with this executable as the daemon; a signal
// that cut it short is its exit code, 128+signal.
func cmdDemo(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newCommandFlags("demo", stderr)
	codexBin := fs.String("codex-bin", getenv("CODEX_BIN"), "native codex binary (env CODEX_BIN)")
	keep := fs.Bool("keep", false, "keep the demo's temporary directory (logs, sessions.json)")
	latency := fs.Duration("model-latency", 0, "delay every mock model answer by this much (watch busy children with: supervisor status --state-dir <state dir>)")
	if err := fs.Parse(args); err != nil {
		return flagsError(err)
	}
	loc, err := daemon.FindCodex(*codexBin, daemon.CodexBinSource(fs, *codexBin))
	if err != nil {
		return fmt.Errorf("find codex: %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable: %w", err)
	}
	err = demo.Run(ctx, demo.Config{Codex: loc.Bin, Supervisor: self, Keep: *keep, Latency: *latency, Stdout: stdout, Stderr: stderr})
	if sig := (*demo.Signal)(nil); errors.As(err, &sig) {
		return exitCode(128 + int(sig.Sig))
	}
	return err
}
