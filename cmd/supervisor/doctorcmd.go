package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/control"
	"github.com/molecule-ai/codex-warm/doctor"
	"github.com/molecule-ai/codex-warm/inbox/molecule"
)

// cmdDoctor checks what `supervisor run` would use with the same flags and environment
// (package doctor), one line a check, and fails when a check failed.
func cmdDoctor(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, cfgErr := parseDaemonFlags("doctor", args, getenv, stderr)
	var ec exitCode
	if errors.As(cfgErr, &ec) {
		return ec
	}
	// The same environment run gives its children: the secrets removed, HOME of --child-user.
	env := childEnv(os.Environ())
	cred, childEnvironment, credErr := childCredential(cfg.ChildUser, env)
	if credErr == nil {
		env = childEnvironment
	}
	budget, budgetErr := cfg.memoryBudget()
	dcfg := doctor.Config{
		Inbox: cfg.Inbox, StateDir: cfg.StateDir, Listen: cfg.Listen, InboxTokenSet: cfg.InboxToken != "",
		CodexConfig: cfg.CodexConfig, Cwd: cfg.Cwd, WorkDir: threadsWorkDir(cfg.Cwd),
		ChildUser: cfg.ChildUser, Credential: cred, Env: env, Getenv: getenv,
		ChatGPTTokens: cfg.ChatGPTTokens, ChatGPTPlatformCheck: cfg.ChatGPTPlatformCheck,
		TokenRefreshAhead: cfg.TokenRefreshAhead, PlatformTimeout: cfg.PlatformTimeout,
		MaxChildren: cfg.MaxChildren, MemoryBudget: budget, MemoryBudgetErr: budgetErr,
		NoCodexHint: noCodexHint,
		Steps: doctor.Steps{
			FindCodex: func() (doctor.Codex, error) {
				loc, err := findCodex(cfg.CodexBin, cfg.CodexBinFrom)
				return doctor.Codex(loc), err
			},
			ProbeCodex: func(ctx context.Context, tmpl appserver.Config, also func(context.Context, *appserver.Client)) control.CodexAuth {
				return probeCodex(ctx, tmpl, also)
			},
			PlanLogin: func(ctx context.Context, codexHome string) (doctor.LoginPlan, error) {
				in := loginInputs{mode: cfg.ChatGPTTokens, env: map[string]string{}, codexHome: codexHome}
				for _, k := range platformLoginEnv {
					in.env[k] = getenv(k)
				}
				if cfg.Inbox == "molecule" {
					if mcfg, err := molecule.ConfigFromEnv(getenv); err == nil {
						mcfg.RequestTimeout = cfg.PlatformTimeout
						in.platform = &mcfg
					}
				}
				plan, err := planLogin(ctx, in, zap.NewNop())
				return doctor.LoginPlan{Owner: plan.owner, Why: plan.why, Sources: plan.sources}, err
			},
			ChildAccess: func(ctx context.Context, bin, codexHome, workDir string) []doctor.AccessProblem {
				var out []doctor.AccessProblem
				for _, p := range checkChildAccess(ctx, cfg.ChildUser, cred, bin, env, codexHome, workDir) {
					out = append(out, doctor.AccessProblem(p))
				}
				return out
			},
		},
	}
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
