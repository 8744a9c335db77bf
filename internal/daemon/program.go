package daemon

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/daemon/handoff"
)

// Program is how the binary runs the daemon: its version, the run flags and the streams.
type Program struct {
	Version string
	// Args are run's flags; Flags returns the flag set of the command name, writing its usage
	// and errors to w.
	Args  []string
	Flags func(name string, w io.Writer) *flag.FlagSet
	// MainThread is the main thread's server (nil: none, in-process tests; the daemon then
	// cannot reload in place).
	MainThread     *MainThread
	Getenv         func(string) string
	Stdout, Stderr io.Writer
}

// Run is `supervisor run`: it takes over from a previous image when it was reloaded into, and
// runs the daemon until it is stopped. An error already in the daemon's log is an ExitCode.
func Run(ctx context.Context, p Program) error {
	mt, getenv, stderr := p.MainThread, p.Getenv, p.Stderr
	if asInit(getenv) {
		return ExitCode(runInit(mt, stderr))
	}
	_ = os.Unsetenv(initChildEnv)
	hups, sigs, early := takeSignals()
	defer signal.Stop(hups)
	defer signal.Stop(sigs)
	// First: a reloaded daemon's handoff carries the secret variables its configuration reads.
	in, herr := readHandoff(getenv)
	// The takeover's bound runs from here, whatever this image then waits for.
	in.watch(mt, defaultTakeoverTimeout)
	flagOut := stderr
	var flagBuf bytes.Buffer
	if in != nil {
		flagOut = &flagBuf // its first line says why, for the give-back
	}
	cfg, err := ParseFlags(p.Flags("run", flagOut), p.Args, getenv)
	if err != nil && in != nil {
		// This binary refuses the configuration the previous one ran with; the previous binary
		// logs why (the usage text is not for its JSON log).
		why, _, _ := strings.Cut(strings.TrimSpace(flagBuf.String()), "\n")
		gerr := in.giveBack(mt, fmt.Errorf("its configuration was refused: %s (%w)", why, err))
		_, _ = stderr.Write(flagBuf.Bytes())
		fmt.Fprintf(stderr, "supervisor run: reload: cannot give the daemon back to the previous binary: %v\n", gerr)
		return err
	}
	_, _ = stderr.Write(flagBuf.Bytes())
	if err != nil {
		return err
	}
	log, err := newLogger(cfg.LogLevel, cfg.LogFormat, stderr)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	in.setLogger(log)
	if herr != nil {
		log.Error("reload: cannot read the previous image's handoff; giving it back to the previous binary", zap.Error(herr))
		_ = log.Sync()
		gerr := in.giveBack(mt, herr)
		// Still here: the children and listeners it names cannot be told apart. Exiting ends the
		// children (parent-death signal), and the next start's boot sweep clears what they left.
		log.Error("reload: cannot give the handoff back; exiting", zap.Error(gerr))
		return ExitCode(1)
	}
	var doc *handoff.Doc
	if in != nil {
		doc = in.doc
		if err := checkBeforeTakeover(ctx, mt, in, cfg, getenv, log); err != nil {
			return err
		}
	}
	catchStops(sigs, early, doc, getenv, log)
	if err := runTakingOver(ctx, daemonRun{cfg: cfg, getenv: getenv, log: log, sigs: sigs, hups: hups, mt: mt, version: p.Version, handoff: doc, in: in}); err != nil {
		// The log line is the one report: runMain must not print the error again.
		log.Error("daemon stopped with an error", zap.Error(err))
		return ExitCode(1)
	}
	return nil
}
