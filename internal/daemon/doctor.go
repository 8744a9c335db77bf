package daemon

import (
	"context"
	"os"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/bridge/molecule"
	"github.com/molecule-ai/codex-warm/internal/control"
	"github.com/molecule-ai/codex-warm/internal/doctor"
)

// DoctorConfig is what the doctor's checks see of cfg, with the daemon's own start-up steps
// (finding codex, asking it for its login, planning the login's owner, the child user's
// access) for them to repeat. The error says why --child-user could not be resolved.
func DoctorConfig(cfg Config, getenv func(string) string) (doctor.Config, error) {
	// The same environment run gives its children: the secrets removed, HOME of --child-user.
	env := childEnv(os.Environ())
	cred, childEnvironment, credErr := childCredential(cfg.ChildUser, env)
	if credErr == nil {
		env = childEnvironment
	}
	budget, budgetErr := cfg.memoryBudget()
	return doctor.Config{
		Inbox: cfg.Inbox, StateDir: cfg.StateDir, Listen: cfg.Listen, InboxTokenSet: cfg.InboxToken != "",
		CodexConfig: cfg.CodexConfig, Cwd: cfg.Cwd, WorkDir: threadsWorkDir(cfg.Cwd),
		ChildUser: cfg.ChildUser, Credential: cred, Env: env, Getenv: getenv,
		ChatGPTTokens: cfg.ChatGPTTokens, ChatGPTPlatformCheck: cfg.ChatGPTPlatformCheck,
		TokenRefreshAhead: cfg.TokenRefreshAhead, PlatformTimeout: cfg.PlatformTimeout, EventStream: cfg.EventStream,
		MaxChildren: cfg.MaxChildren, MemoryBudget: budget, MemoryBudgetErr: budgetErr,
		NoCodexHint: noCodexHint,
		Steps: doctor.Steps{
			FindCodex: func() (doctor.Codex, error) {
				loc, err := FindCodex(cfg.CodexBin, cfg.CodexBinFrom)
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
	}, credErr
}
