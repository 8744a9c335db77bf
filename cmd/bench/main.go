// Command bench compares the exec-per-message design (`codex exec resume <thread> <prompt>` per
// message) with the warm daemon, on the real native codex binary against a mock model, and
// measures the supervisor alone at scale. Every comparison runs on the transport production uses
// (codex on the Responses websocket over TLS, through a proxy adding a round trip, --rtt) and,
// in the full run, again on HTTP + SSE on loopback, reported in further columns. It also sets the daemon against itself:
// the first message of a new chat with and without spare children, throughput on the Molecule
// inbox (a fake platform in the bench process) against the local inbox, and how many warm chats
// a GB holds counted by RSS and by PSS.
//
// Every comparison runs both sides in the same invocation, alternating their samples, and
// reports medians and ratios: the machine is shared and noisy, so absolute times mean little and
// nothing here asserts on them. Output: a table, then name=value summary lines (the last lines);
// --json writes the summary to a file as well.
//
//	go run ./cmd/bench --codex-bin $CODEX_BIN --supervisor-bin $PWD/bin/supervisor [--quick]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/molecule-ai/codex-warm/internal/childproc"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// summaryKeys are the summary's keys in output order; each starts as NaN until measured.
func summaryKeys() []string {
	return []string{
		"latency_ratio_exec_over_warm", "exec_ms_per_msg", "warm_ms_per_msg",
		"exec_cpu_ms_per_msg", "warm_cpu_ms_per_msg", "cpu_ratio_exec_over_warm",
		"exec_first_msg_ms", "warm_first_msg_ms", "exec_first_msg_cpu_ms", "warm_first_msg_cpu_ms",
		"daemon_overhead_ms", "daemon_overhead_pct", "daemon_overhead_ok",
		"daemon_overhead_ci_lo_ms", "daemon_overhead_ci_hi_ms", "daemon_path_ms", "daemon_path_median_ms", "daemon_turn_ms", "bare_turn_ms",
		"throughput_ratio", "exec_msgs_per_sec", "daemon_msgs_per_sec", "exec_cpu_s_per_msg", "daemon_cpu_s_per_msg",
		"history_1_ratio", "history_50_ratio", "history_200_ratio",
		"daemon_rss_per_child_kb", "daemon_rss_mb", "codex_native_rss_mb", "codex_node_rss_mb",
		"scale_p50_us", "scale_p99_us", "scale_rss_mb", "scale_heap_mb", "scale_rss_per_session_kb",
		"scale_goroutines_per_session",
		"first_msg_exec_ms", "first_msg_daemon_ms", "first_msg_spares_ms", "first_msg_spares",
		"first_msg_ratio_exec_over_daemon", "first_msg_ratio_exec_over_spares",
		"molecule_msgs_per_sec", "molecule_local_msgs_per_sec", "molecule_max_in_flight",
		"molecule_local_max_in_flight", "molecule_cpu_s_per_msg",
		"molecule_stream_median_ms", "molecule_stream_p95_ms", "molecule_poll_median_ms", "molecule_poll_p95_ms",
		"molecule_stream_idle_rpm", "molecule_poll_idle_rpm",
		"chats_per_gb_rss_8", "chats_per_gb_pss_8", "chats_per_gb_rss_32", "chats_per_gb_pss_32",
		"growth_daemon_write_bytes_per_turn_2", "growth_daemon_write_bytes_per_turn_1000",
		"growth_daemon_cpu_ms_per_turn_2", "growth_daemon_cpu_ms_per_turn_1000",
		"growth_codex_home_bytes_per_turn_2", "growth_codex_home_bytes_per_turn_1000",
	}
}

// run is the whole command; it returns the exit code. 0: every comparison ran (and, with
// --strict, the overhead target was met); 1: a comparison failed, a process was left behind, or
// the strict target was missed; 2: bad flags.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case scaleWorkerCmd:
			return scaleWorkerMain(ctx, args[1:], stdout, stderr)
		case mockWorkerCmd:
			return mockWorkerMain(args[1:], stdin, stdout, stderr)
		}
	}
	cfg, err := parseConfig(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeoutCause(ctx, cfg.Timeout, fmt.Errorf("bench ran past --timeout %s", cfg.Timeout))
	defer cancel()

	ws, err := newWorkspace()
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	b := &bench{cfg: cfg, ws: ws, tick: childproc.ProcFS{}.ClockTick(), log: stderr, sum: newSummary(summaryKeys()...)}
	b.sum.set("daemon_overhead_ok", false)
	b.sum.set("codex_version", "unknown")
	if cfg.needsCodex() {
		v, err := codexVersion(ctx, cfg.CodexBin)
		if err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			return 1
		}
		b.sum.set("codex_version", v)
	}
	b.sum.set("quick", cfg.Quick)

	steps := []struct {
		name, label string // label: as in the table
		fn          func(context.Context) error
	}{
		{cmpScale, labelScale, b.runScale},
		{cmpLatency, labelLatency, b.runLatency},
		{cmpOverhead, labelOverhead, b.runOverhead},
		{cmpThroughput, labelThroughput, b.runThroughput},
		{cmpHistory, labelHistory, b.runHistory},
		{cmpMemory, labelMemory, b.runMemory},
		{cmpFirstMsg, labelFirstMsg, b.runFirstMessage},
		{cmpMolecule, labelMolecule, b.runMolecule},
		{cmpMolRealtime, labelMolRealtime, b.runMolRealtime},
		{cmpChatsGB, labelChatsGB, b.runChatsPerGB},
		{cmpGrowth, labelGrowth, b.runGrowth},
		{cmpLongThread, labelLongThread, b.runLongThread},
		{cmpShared, labelShared, b.runShared},
	}
	// Every codex process the bench starts inherits this: the mocks serving TLS write their CA
	// there (workspace.caFile).
	if err := os.Setenv("SSL_CERT_FILE", ws.caFile()); err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	b.sum.set("paths", strings.Join(cfg.Paths, ","))
	b.sum.set("rtt_ms", ms(cfg.RTT))
	started := time.Now()
	var failed []string
	primary := b.sum
	for i, pathName := range cfg.Paths {
		b.path = pathFor(pathName, cfg.RTT)
		b.addNote("0 network", pathName, b.path.describe())
		if i > 0 {
			// A later path's figures go under its own keys: http_exec_ms_per_msg, ….
			b.sum = newSummary(summaryKeys()...)
		}
		for _, st := range steps {
			if !cfg.runs(st.name) || (i > 0 && (st.name == cmpScale || st.name == cmpMolRealtime)) {
				continue // scale runs no codex, and the real-time run measures the platform's road: once is enough
			}
			name := st.name + " (" + pathName + ")"
			if ctx.Err() != nil {
				// Interrupted or out of time: what is left would only fail one by one.
				failed = append(failed, name)
				b.addNote(st.label, "NOT RUN", context.Cause(ctx).Error())
				continue
			}
			t0 := time.Now()
			b.logf("%s on %s", st.name, b.path.describe())
			if err := st.fn(ctx); err != nil {
				failed = append(failed, name)
				fmt.Fprintf(stderr, "bench: %s FAILED: %v\n", name, err)
				b.addNote(st.label, "FAILED", firstLine(err.Error()))
			} else {
				b.logf("%s done in %s", name, time.Since(t0).Round(time.Millisecond))
			}
		}
		if i > 0 {
			primary.merge(pathName+"_", b.sum)
			b.sum = primary
		}
	}
	leftovers, check := b.checkLeftovers()
	if !cfg.KeepTmp {
		if err := ws.remove(); err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
		}
	} else {
		b.logf("scratch kept in %s", ws.root)
	}

	b.sum.set("comparisons_failed", len(failed))
	b.sum.set("leftover_processes", leftovers)
	b.sum.set("elapsed_s", time.Since(started).Seconds())

	if err := writeTable(stdout, cfg.Paths, b.rows); err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "\n%s\n", check)
	if len(failed) > 0 {
		fmt.Fprintf(stdout, "failed: %s (errors in full on stderr)\n", strings.Join(failed, ", "))
	}
	fmt.Fprintln(stdout)
	code := 0
	if cfg.JSONFile != "" {
		js, err := b.sum.marshalJSON()
		if err == nil {
			err = os.WriteFile(cfg.JSONFile, js, 0o644)
		}
		if err != nil {
			fmt.Fprintf(stderr, "bench: write %s: %v\n", cfg.JSONFile, err)
			code = 1
		}
	}
	if err := b.sum.writeKV(stdout); err != nil {
		return 1
	}
	switch {
	case len(failed) > 0 || leftovers != 0:
		code = 1
	case cfg.Strict && b.sum.get("daemon_overhead_ok") != true:
		code = 1
	}
	return code
}

// codexVersion asks the binary for its version: "codex-cli 0.169.0" → "0.169.0".
func codexVersion(ctx context.Context, bin string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("codex --version (%s): %w", bin, err)
	}
	f := strings.Fields(string(out))
	if len(f) == 0 {
		return "", fmt.Errorf("codex --version (%s): empty output", bin)
	}
	return f[len(f)-1], nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return truncate(s, 300)
}
