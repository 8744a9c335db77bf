package harness

import (
	"os"
	"strings"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

// NewPlatform starts a fake Molecule platform for workspaceID that behaves like the real one
// where the daemon's correctness depends on it: notifies are echoed back into the feed (the
// daemon must skip its own replies) and the mailbox takes acks (the daemon must report
// acked_seq). seed drives its chaos draws.
func NewPlatform(workspaceID string, seed uint64) *moleculetest.Platform {
	// The tools' daemons poll every 100 ms, fifty times the production 5 s: the rate window is
	// scaled the same way (600 requests in 1.2 s), so a daemon meets the limit as often as in
	// production.
	return moleculetest.New(moleculetest.Config{WorkspaceID: workspaceID, EchoNotifies: true, AckEnabled: true, Seed: seed,
		RateWindow: moleculetest.DefaultRateWindow / 50})
}

// PlatformEnv is the environment that makes `supervisor run --inbox molecule` use p.
func PlatformEnv(p *moleculetest.Platform) []string {
	return []string{
		"PLATFORM_URL=" + p.URL(),
		"WORKSPACE_ID=" + p.WorkspaceID(),
		"MOLECULE_WORKSPACE_TOKEN=" + p.Token(),
	}
}

// CleanEnv is the tool's environment minus everything that would configure the daemon or codex
// behind the tool's back: the platform, CODEX_HOME, CODEX_BIN, the state and configs
// directories, and every MOLECULE_* and CODEX_WARM_* variable.
func CleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case k == "PLATFORM_URL", k == "WORKSPACE_ID", k == "CODEX_HOME", k == "CONFIGS_DIR",
			k == "CODEX_CHANNEL_MOLECULE_STATE_DIR", k == "CODEX_BIN",
			strings.HasPrefix(k, "MOLECULE_"), strings.HasPrefix(k, "CODEX_WARM_"):
			continue
		}
		env = append(env, kv)
	}
	return env
}
