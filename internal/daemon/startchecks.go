package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/bridge/molecule"
	"github.com/molecule-ai/codex-warm/internal/daemon/handoff"
)

// maxPreflightSecrets bounds what a preflight reads from its stdin.
const maxPreflightSecrets = 1 << 20

// startChecks are the checks at which a daemon's start fails, before it touches anything: its
// state directory, the Molecule configuration, the children's user, and the codex binary
// (found where the flags say, or beside the executable, and answering --version). A new image
// runs them before it takes a reload over (and gives everything back when they fail), and the
// old image has the new binary run them, with its own flags and environment, in the preflight
// (ReloadPreflight): a binary that would fail them is never executed.
func startChecks(ctx context.Context, cfg Config, getenv func(string) string) error {
	if err := warnStateDirMode(cfg.StateDir, zap.NewNop()); err != nil {
		return err
	}
	if cfg.Inbox == "molecule" {
		if _, err := molecule.ConfigFromEnv(getenv); err != nil {
			return fmt.Errorf("molecule config: %w", err)
		}
	}
	env := childEnv(os.Environ())
	if _, _, err := childCredential(cfg.ChildUser, env); err != nil {
		return err
	}
	loc, err := FindCodex(cfg.CodexBin, cfg.CodexBinFrom)
	if err != nil {
		return fmt.Errorf("find codex: %w", err)
	}
	vctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	if _, err := appserver.Version(vctx, loc.Bin, env); err != nil {
		return fmt.Errorf("check codex %s: %w", loc.Bin, err)
	}
	return nil
}

// ReloadPreflight prints what a daemon checks before it re-executes into this binary. With the
// running daemon's `run` flags as p.Args, and its secret variables as a JSON object on stdin (not
// in the environment, which /proc shows), it first runs startChecks as the new image would,
// and fails with their error.
func ReloadPreflight(ctx context.Context, p Program, stdin io.Reader) int {
	getenv, stdout, stderr := p.Getenv, p.Stdout, p.Stderr
	if len(p.Args) > 0 {
		secrets := map[string]string{}
		if b, err := io.ReadAll(io.LimitReader(stdin, maxPreflightSecrets)); err == nil && len(b) > 0 {
			if err := json.Unmarshal(b, &secrets); err != nil {
				fmt.Fprintf(stderr, "preflight: the secret variables on stdin are not a JSON object: %v\n", err)
				return 1
			}
		}
		env := func(k string) string {
			if v, ok := secrets[k]; ok {
				return v
			}
			return getenv(k)
		}
		cfg, err := ParseFlags(p.Flags("run", io.Discard), p.Args, env)
		if err != nil {
			fmt.Fprintf(stderr, "preflight: the daemon's flags are refused: %v\n", err)
			return 1
		}
		if err := startChecks(ctx, cfg, env); err != nil {
			fmt.Fprintf(stderr, "preflight: %v\n", err)
			return 1
		}
	}
	b, _ := json.Marshal(handoff.Preflight{Program: handoff.PreflightProgram, Version: p.Version, Readable: handoff.Readable})
	fmt.Fprintf(stdout, "%s\n", b)
	return 0
}

// checkBeforeTakeover runs startChecks in a reloaded image before it takes anything over: one
// that failed later would end the daemon with every child it took over, so the previous binary
// takes everything back instead. That binary, given it back, serves on whatever its checks say
// now: it ran the daemon until the exec. It returns only when the image goes on, or with the
// exit code when even the give-back failed.
func checkBeforeTakeover(ctx context.Context, mt *MainThread, in *incoming, cfg Config, getenv func(string) string, log *zap.Logger) error {
	if in.givenBack != "" {
		return nil
	}
	err := startChecks(ctx, cfg, getenv)
	if err == nil {
		return nil
	}
	log.Error("reload: this binary cannot run the daemon; giving it back to the previous binary", zap.Error(err))
	_ = log.Sync()
	gerr := in.giveBack(mt, fmt.Errorf("its start checks failed: %w", err))
	log.Error("reload: cannot give the handoff back; exiting", zap.Error(gerr))
	return ExitCode(1)
}
