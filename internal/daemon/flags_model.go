package daemon

import (
	"strings"
)

// ModelConfig is what chats may choose with /model and /effort, and the operator's model and
// effort (internal/chatsettings).
type ModelConfig struct {
	// Model and Effort are the operator's: every chat's unless it chose its own; empty leaves
	// them to the Molecule workspace and codex's config.
	Model, Effort string
	// AllowModels, when not empty, are the only models /model may choose besides the
	// configured default; AllowEfforts are the efforts for models codex's catalog does not
	// describe. AllowHidden lets /model choose a model the catalog hides.
	AllowModels, AllowEfforts []string
	AllowHidden               bool
	// PeerCommands obeys a peer agent's /model and /effort.
	PeerCommands bool
}

// modelFlags are ModelConfig's: the chats' model and effort, and what /model and /effort may
// choose.
func modelFlags(e *envFlags, c *Config) func() error {
	e.str(&c.Models.Model, "model", "CODEX_WARM_MODEL", "", "model of every chat that did not choose one with /model; default: the Molecule workspace's model, else codex's config")
	e.str(&c.Models.Effort, "effort", "CODEX_WARM_EFFORT", "", "reasoning effort of every chat that did not choose one with /effort (a level the model supports); default: codex's config, else the model's own")
	e.fs.Func("allow-models", "comma-separated models /model may choose (besides the configured default); default: codex's catalog (model/list), and with a provider other than OpenAI's only the default (env CODEX_WARM_ALLOW_MODELS)",
		listInto(&c.Models.AllowModels))
	e.fs.Func("allow-efforts", "comma-separated efforts /effort may choose for a model codex's catalog does not describe (env CODEX_WARM_ALLOW_EFFORTS)",
		listInto(&c.Models.AllowEfforts))
	c.Models.AllowModels = splitList(e.getenv("CODEX_WARM_ALLOW_MODELS"))
	c.Models.AllowEfforts = splitList(e.getenv("CODEX_WARM_ALLOW_EFFORTS"))
	e.bool(&c.Models.AllowHidden, "allow-hidden-models", "CODEX_WARM_ALLOW_HIDDEN_MODELS", false, "let /model choose models codex's catalog hides")
	e.bool(&c.Models.PeerCommands, "peer-model-commands", "CODEX_WARM_PEER_MODEL_COMMANDS", false, "obey /model and /effort from peer agents (their text is another agent's output, and models differ in cost); default: refused")
	return nil
}

// listInto is a flag.Func that sets *p to a comma-separated list (replacing the environment's).
func listInto(p *[]string) func(string) error {
	return func(s string) error {
		*p = splitList(s)
		return nil
	}
}

// splitList splits a comma-separated list, dropping blanks.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
