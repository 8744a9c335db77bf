package daemon

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/bridge/molecule"
	"github.com/molecule-ai/codex-warm/internal/chatsettings"
	"github.com/molecule-ai/codex-warm/internal/control"
	"github.com/molecule-ai/codex-warm/internal/metrics"
	"github.com/molecule-ai/codex-warm/internal/protocol"
	"github.com/molecule-ai/codex-warm/supervisor"
	"github.com/molecule-ai/codex-warm/supervisor/chatjob"
)

// codexModels is what the start-up check's codex said about models: its config's model,
// effort and provider (config/read) and its catalog (model/list, hidden models included).
type codexModels struct {
	config  protocol.EffectiveConfig
	catalog []protocol.Model
	err     error // why either is missing; the chats may then choose only --allow-models
}

// readCodexModels asks the start-up check's codex for its config's model and its catalog.
func readCodexModels(ctx context.Context, c *appserver.Client, conf protocol.ConfigReadResult, confErr error) codexModels {
	m := codexModels{config: conf.Config, err: confErr}
	cat, err := c.ListModels(ctx, true)
	if err != nil && m.err == nil {
		m.err = err
	}
	m.catalog = cat
	return m
}

// customProvider reports a model provider other than OpenAI's built-in one.
func (m codexModels) customProvider() bool {
	p := m.config.ModelProvider
	return p != nil && *p != "" && *p != "openai"
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// openChatSettings opens each chat's model and effort (chatsettings), checked against what
// codex said at start-up, with the operator's flags and the Molecule workspace's model.
func (d *daemon) openChatSettings(cfg Config, getenv func(string) string) (*chatsettings.Store, error) {
	var workspace, from string
	if cfg.Inbox == "molecule" {
		var err error
		workspace, from, err = chatsettings.WorkspaceModel(getenv, molecule.ConfigsDir(getenv))
		if err != nil {
			d.log.Warn("could not read the Molecule workspace's model; chats run on the operator's or codex's", zap.Error(err))
		}
	}
	m := d.codexModels
	if m.err != nil {
		d.log.Warn("codex did not say which models it has; /model offers only --allow-models and the configured default", zap.Error(m.err))
	}
	s, err := chatsettings.Open(chatsettings.Config{
		Path: chatsettings.PathIn(cfg.StateDir), Catalog: m.catalog, AllowHidden: cfg.Models.AllowHidden,
		CustomProvider: m.customProvider(), AllowModels: cfg.Models.AllowModels, AllowEfforts: cfg.Models.AllowEfforts,
		Operator:  chatsettings.Choice{Model: cfg.Models.Model, Effort: cfg.Models.Effort},
		Workspace: workspace,
		Codex:     chatsettings.Choice{Model: deref(m.config.Model), Effort: deref(m.config.ModelReasoningEffort)},
	})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", chatsettings.FileName, err)
	}
	r := s.Resolve("")
	d.log.Info("chats' model and effort", zap.String("model", r.Model), zap.String("model_from", string(r.ModelFrom)),
		zap.String("effort", r.Effort), zap.String("effort_from", string(r.EffortFrom)), zap.String("workspace_model_from", from),
		zap.Int("catalog", len(m.catalog)), zap.Bool("custom_provider", m.customProvider()), zap.Int("chats_with_a_choice", len(s.Chosen())))
	return s, nil
}

// chatControls are the chat commands' Controls: the supervisor's, each chat's model and
// effort, and the jobs /compact and /undo run.
type chatControls struct {
	*supervisor.Supervisor
	*chatsettings.Store
	*chatjob.Jobs
	peers bool
	met   *metrics.Metrics // nil without --metrics-listen
}

// PeersMayChoose reports --peer-model-commands.
func (c chatControls) PeersMayChoose() bool { return c.peers }

// ObserveCommand counts a chat command in the metrics, when they are served.
func (c chatControls) ObserveCommand(name string) {
	if c.met != nil {
		c.met.ObserveCommand(name)
	}
}

// chatModels is the status document's part on models.
func chatModels(s *chatsettings.Store) *control.ChatModels {
	if s == nil {
		return nil
	}
	m := &control.ChatModels{Default: s.Resolve("")}
	for k := range s.Chosen() {
		if m.Chats == nil {
			m.Chats = map[string]chatsettings.Resolved{}
		}
		m.Chats[k] = s.Resolve(k)
	}
	return m
}
