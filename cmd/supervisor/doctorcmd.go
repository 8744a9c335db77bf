package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/molecule-ai/codex-warm/internal/daemon"
	"github.com/molecule-ai/codex-warm/internal/doctor"
)

// cmdDoctor checks what `supervisor run` would use with the same flags and environment
// (package doctor), one line a check, and fails when a check failed.
func cmdDoctor(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, cfgErr := daemon.ParseFlags(newCommandFlags("doctor", stderr), args, getenv)
	var ec daemon.ExitCode
	if errors.As(cfgErr, &ec) {
		return ec
	}
	dcfg, credErr := daemon.DoctorConfig(cfg, getenv)
	fmt.Fprintf(stdout, "supervisor doctor: checking what `supervisor run` would use (inbox %s, state dir %s)\n\n", cfg.Inbox, cfg.StateDir)
	results := doctor.Run(ctx, dcfg, errors.Join(cfgErr, credErr))
	var warns, fails int
	for _, r := range results {
		fmt.Fprintln(stdout, r)
		switch r.Status {
		case doctor.Warn:
			warns++
		case doctor.Fail:
			fails++
		}
	}
	fmt.Fprintf(stdout, "\n%d checks: %d failed, %d warnings\n", len(results), fails, warns)
	if fails > 0 {
		return exitCode(1)
	}
	return nil
}
