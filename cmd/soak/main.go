// Command soak is a bounded chaos soak of the daemon: the real codex binary against a mock model,
// the fake Molecule platform, and `supervisor run` as a real child process, all on loopback. For
// a fixed time it feeds messages of many chats into the platform's activity feed while it
// SIGKILLs codex children and the daemon (restarting it), makes the platform answer 502, hang or
// forget the cursor, and makes the model hang or fail. Then it lets everything settle and checks
// that every message got exactly one reply, that nothing was acknowledged before its reply was
// delivered, that duplicates happen only in the at-least-once kill window, that sessions
// survived, that no codex process is left, and that the daemon returned to its idle baseline.
//
//	go run ./cmd/soak --codex-bin $CODEX_BIN --supervisor-bin ./bin/supervisor [--size ci] [--seed N]
//
// Output: progress lines, a table of checks (PASS/FAIL), and name=value lines ending with
// result=PASS|FAIL. Exit status 0 when every check passed, 1 when one failed, 2 for bad flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// cleanupTimeout bounds the teardown, which runs even after the deadline passed.
const cleanupTimeout = 30 * time.Second

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg, err := parseConfig(args, getenv, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "soak: %v\n", err)
		}
		return 2
	}
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano() % 1_000_000_000) // short enough to type back
	}
	fmt.Fprintf(stdout, "soak: seed=%d size=%s chats=%d messages/chat=%d duration=%s daemon-kills=%d child-kills=%d "+
		"platform-hangs=%d cursor-gone=%d flaky-episodes=%d platform-fail-rate=%.2f model-hang-rate=%.2f model-fail-rate=%.2f "+
		"turn-timeout=%s idle-ttl=%s max-children=%d deadline=%s\n",
		cfg.Seed, cfg.Size, cfg.Chats, cfg.Messages, cfg.Duration, cfg.DaemonKills, cfg.ChildKills, cfg.PlatformHangs,
		cfg.CursorGone, cfg.FlakyEpisodes, cfg.PlatformFailRate, cfg.ModelHangRate, cfg.ModelFailRate,
		cfg.TurnTimeout, cfg.IdleTTL, cfg.MaxChildren, cfg.Deadline)

	h, err := newRig(cfg, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "soak: %v\n", err)
		return 1
	}
	o := &outcome{cfg: cfg}
	dctx, cancel := context.WithTimeout(ctx, cfg.Deadline)
	err = h.soak(dctx, o)
	cancel()
	if err != nil {
		if dctx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("overall deadline %s passed: %w", cfg.Deadline, err)
		}
		o.fatal = err
		h.logf("soak stopped early: %v", err)
	}

	// Teardown runs on its own clock: it must happen even when the deadline passed or the soak
	// was interrupted.
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	swept := h.close(cctx)
	ccancel()
	if o.fatal != nil && len(o.leftovers) == 0 {
		o.leftovers = swept
	}
	h.finish(o)
	o.elapsed = time.Since(h.start)

	checks := verdict(o)
	keep := cfg.Keep || !passed(checks)
	if keep {
		fmt.Fprintf(stdout, "\nkept %s (daemon-N.log, state/, codex-home/)\n", h.root)
	} else if err := os.RemoveAll(h.root); err != nil {
		fmt.Fprintf(stderr, "soak: remove %s: %v\n", h.root, err)
	}
	printReport(stdout, o, checks)
	if !passed(checks) {
		return 1
	}
	return 0
}
