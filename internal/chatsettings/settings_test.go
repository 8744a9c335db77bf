package chatsettings_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/internal/chatsettings"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// model is a catalog entry as model/list gives it.
func model(id string, hidden, isDefault bool, def string, efforts ...string) protocol.Model {
	m := protocol.Model{ID: id, Model: id, DisplayName: id, Hidden: hidden, IsDefault: isDefault, DefaultReasoningEffort: def}
	for _, e := range efforts {
		m.SupportedReasoningEfforts = append(m.SupportedReasoningEfforts, protocol.ReasoningEffortOption{ReasoningEffort: e})
	}
	return m
}

// catalog is a model/list answer of two pages (appserver.ListModels joins them).
func catalog() []protocol.Model {
	page1 := []protocol.Model{model("alpha", false, true, "medium", "low", "medium", "high")}
	page2 := []protocol.Model{model("beta", false, false, "low", "low", "minimal"), model("secret", true, false, "high", "high")}
	return append(page1, page2...)
}

func open(t *testing.T, cfg chatsettings.Config) *chatsettings.Store {
	t.Helper()
	s, err := chatsettings.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestPrecedence(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cfg        chatsettings.Config
		chat       chatsettings.Choice
		model      string
		modelFrom  chatsettings.Source
		effort     string
		effortFrom chatsettings.Source
	}{
		{"catalog default", chatsettings.Config{}, chatsettings.Choice{}, "alpha", chatsettings.FromCodex, "medium", chatsettings.FromModel},
		{"codex config", chatsettings.Config{Codex: chatsettings.Choice{Model: "beta", Effort: "minimal"}}, chatsettings.Choice{},
			"beta", chatsettings.FromCodex, "minimal", chatsettings.FromCodex},
		{"workspace over codex", chatsettings.Config{Workspace: "beta", Codex: chatsettings.Choice{Model: "alpha"}}, chatsettings.Choice{},
			"beta", chatsettings.FromWorkspace, "low", chatsettings.FromModel},
		{"operator over workspace", chatsettings.Config{Operator: chatsettings.Choice{Model: "alpha", Effort: "high"}, Workspace: "beta"},
			chatsettings.Choice{}, "alpha", chatsettings.FromOperator, "high", chatsettings.FromOperator},
		{"chat over operator", chatsettings.Config{Operator: chatsettings.Choice{Model: "alpha", Effort: "high"}},
			chatsettings.Choice{Model: "beta", Effort: "minimal"}, "beta", chatsettings.FromChat, "minimal", chatsettings.FromChat},
		{"an operator effort the chat's model lacks is passed over", chatsettings.Config{Operator: chatsettings.Choice{Effort: "high"}},
			chatsettings.Choice{Model: "beta"}, "beta", chatsettings.FromChat, "low", chatsettings.FromModel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Catalog = catalog()
			s := open(t, cfg)
			if tc.chat.Model != "" {
				if _, err := s.SetModel("c", tc.chat.Model); err != nil {
					t.Fatal(err)
				}
			}
			if tc.chat.Effort != "" {
				if _, err := s.SetEffort("c", tc.chat.Effort); err != nil {
					t.Fatal(err)
				}
			}
			r := s.Resolve("c")
			if r.Model != tc.model || r.ModelFrom != tc.modelFrom || r.Effort != tc.effort || r.EffortFrom != tc.effortFrom {
				t.Errorf("resolved %+v, want %s from %s, %s from %s", r, tc.model, tc.modelFrom, tc.effort, tc.effortFrom)
			}
			if m, e := s.Turn("other"); tc.chat != (chatsettings.Choice{}) && m == tc.model && tc.modelFrom == chatsettings.FromChat && e == tc.effort {
				t.Errorf("another chat runs with this chat's choice: %s %s", m, e)
			}
		})
	}
}

func TestValidation(t *testing.T) {
	s := open(t, chatsettings.Config{Catalog: catalog()})
	var na *chatsettings.NotAllowedError
	if _, err := s.SetModel("c", "secret"); !errors.As(err, &na) || na.What != "model" || slices.Contains(na.Allowed, "secret") {
		t.Errorf("a hidden model without AllowHidden: %v", err)
	}
	if _, err := s.SetModel("c", "gpt-nonesuch"); !errors.As(err, &na) || !slices.Equal(na.Allowed, []string{"alpha", "beta"}) {
		t.Errorf("an unknown model: %v", err)
	}
	if got := s.Resolve("c"); got.Chosen != (chatsettings.Choice{}) {
		t.Errorf("a refusal changed the chat: %+v", got)
	}
	if _, err := s.SetEffort("c", "minimal"); !errors.As(err, &na) || na.What != "effort" || !slices.Equal(na.Allowed, []string{"low", "medium", "high"}) {
		t.Errorf("an effort alpha lacks: %v", err)
	}
	if _, err := s.SetEffort("c", "HIGH"); err != nil {
		t.Fatal(err)
	}
	// beta has no "high": the chat's effort falls back to beta's default, and says so.
	ch, err := s.SetModel("c", "beta")
	if err != nil || ch.DroppedEffort != "high" || ch.Effort != "low" || ch.EffortFrom != chatsettings.FromModel {
		t.Errorf("switch to beta with effort high: %+v %v", ch, err)
	}
	if _, err := s.SetModel("c", chatsettings.Default); err != nil {
		t.Fatal(err)
	}
	if r := s.Resolve("c"); r.Model != "alpha" || r.Chosen != (chatsettings.Choice{}) {
		t.Errorf("after default: %+v", r)
	}

	hidden := open(t, chatsettings.Config{Catalog: catalog(), AllowHidden: true})
	if _, err := hidden.SetModel("c", "secret"); err != nil {
		t.Errorf("a hidden model with AllowHidden: %v", err)
	}
	limited := open(t, chatsettings.Config{Catalog: catalog(), AllowModels: []string{"beta", "local-llm"}})
	if got := limited.AllowedModels(); !slices.Equal(got, []string{"alpha", "beta", "local-llm"}) {
		t.Errorf("--allow-models: allowed %v", got)
	}
}

// With a provider other than OpenAI's the catalog says nothing: only --allow-models and the
// configured default count, and efforts come from the operator's list.
func TestCustomProvider(t *testing.T) {
	s := open(t, chatsettings.Config{Catalog: catalog(), CustomProvider: true, Codex: chatsettings.Choice{Model: "llama"},
		AllowModels: []string{"qwen"}, AllowEfforts: []string{"low", "high"}})
	if got := s.AllowedModels(); !slices.Equal(got, []string{"llama", "qwen"}) {
		t.Errorf("allowed %v, want the default and --allow-models", got)
	}
	if _, err := s.SetModel("c", "alpha"); err == nil {
		t.Error("a catalog model was allowed with a custom provider")
	}
	if _, err := s.SetModel("c", "qwen"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetEffort("c", "medium"); err == nil {
		t.Error("an effort outside the operator's list was allowed")
	}
	r, err := s.SetEffort("c", "high")
	if err != nil || r.Model != "qwen" || r.Effort != "high" {
		t.Errorf("effort high on qwen: %+v %v", r, err)
	}
	bare := open(t, chatsettings.Config{Catalog: catalog(), CustomProvider: true})
	if m, e := bare.Turn("c"); m != "" || e != "" {
		t.Errorf("nothing configured with a custom provider: %q %q, want codex's own", m, e)
	}
	if _, err := bare.SetEffort("c", "low"); err == nil {
		t.Error("an effort was allowed though nobody says what the model takes")
	}
}

func TestFile(t *testing.T) {
	dir := t.TempDir()
	path := chatsettings.PathIn(dir)
	// An older state directory: no file, no choice.
	s := open(t, chatsettings.Config{Path: path, Catalog: catalog()})
	if len(s.Chosen()) != 0 {
		t.Fatalf("choices without a file: %v", s.Chosen())
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("opening wrote the file: %v", err)
	}
	if _, err := s.SetModel("a", "beta"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetEffort("b", "high"); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the file: %v %v", fi, err)
	}
	again := open(t, chatsettings.Config{Path: path, Catalog: catalog()})
	if r := again.Resolve("a"); r.Model != "beta" || r.ModelFrom != chatsettings.FromChat {
		t.Errorf("after a restart chat a: %+v", r)
	}
	if r := again.Resolve("b"); r.Effort != "high" || r.EffortFrom != chatsettings.FromChat {
		t.Errorf("after a restart chat b: %+v", r)
	}
	if err := again.Forget("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := again.SetEffort("b", chatsettings.Default); err != nil {
		t.Fatal(err)
	}
	// The operator narrowed --allow-models since: b's choice of beta no longer counts.
	if _, err := again.SetModel("b", "beta"); err != nil {
		t.Fatal(err)
	}
	narrowed := open(t, chatsettings.Config{Path: path, Catalog: catalog(), AllowModels: []string{"gamma"}})
	if r := narrowed.Resolve("b"); r.Model != "alpha" || r.ModelFrom != chatsettings.FromCodex {
		t.Errorf("a choice --allow-models no longer allows: %+v, want the configured default", r)
	}
	if _, err := again.SetModel("b", chatsettings.Default); err != nil {
		t.Fatal(err)
	}
	third := open(t, chatsettings.Config{Path: path, Catalog: catalog()})
	if got := third.Chosen(); len(got) != 0 {
		t.Errorf("forgotten and cleared chats are still in the file: %v", got)
	}

	if err := os.WriteFile(path, []byte(`{"version": 7, "chats": {}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := chatsettings.Open(chatsettings.Config{Path: path}); err == nil {
		t.Error("a file of another version was read")
	}
	// A write that fails changes nothing.
	ro := filepath.Join(t.TempDir(), "gone", chatsettings.FileName)
	s2 := open(t, chatsettings.Config{Path: ro, Catalog: catalog()})
	if _, err := s2.SetModel("a", "beta"); err == nil {
		t.Error("a write into a missing directory succeeded")
	}
	if r := s2.Resolve("a"); r.ModelFrom == chatsettings.FromChat {
		t.Errorf("a failed write kept the choice: %+v", r)
	}
}

func TestWorkspaceModel(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	dir := t.TempDir()
	if m, _, err := chatsettings.WorkspaceModel(env(nil), dir); m != "" || err != nil {
		t.Errorf("no config.yaml: %q %v", m, err)
	}
	write := func(s string) {
		if err := os.WriteFile(filepath.Join(dir, chatsettings.WorkspaceConfigFile), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("name: w\nmodel: top-model\nruntime_config:\n  command: codex\n  model: rc-model\n")
	if m, from, err := chatsettings.WorkspaceModel(env(nil), dir); m != "rc-model" || err != nil {
		t.Errorf("runtime_config.model: %q %q %v", m, from, err)
	}
	write("model: top-model\nruntime_config:\n  timeout: 3\n")
	if m, _, err := chatsettings.WorkspaceModel(env(nil), dir); m != "top-model" || err != nil {
		t.Errorf("top-level model: %q %v", m, err)
	}
	if m, from, _ := chatsettings.WorkspaceModel(env(map[string]string{"MODEL": "env-model"}), dir); m != "env-model" || from != "MODEL" {
		t.Errorf("MODEL: %q %q", m, from)
	}
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, chatsettings.WorkspaceConfigFile), []byte("runtime_config: {model: elsewhere}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if m, _, _ := chatsettings.WorkspaceModel(env(map[string]string{"WORKSPACE_CONFIG_PATH": other}), dir); m != "elsewhere" {
		t.Errorf("WORKSPACE_CONFIG_PATH: %q", m)
	}
	write("runtime_config: [unclosed\n")
	if _, _, err := chatsettings.WorkspaceModel(env(nil), dir); err == nil {
		t.Error("a config.yaml that is not YAML read without error")
	}
}

// A hostile name (huge, or with control characters) is refused with an answer of bounded size
// that still names what is allowed, the name's control characters escaped.
func TestRefusalOfAHostileName(t *testing.T) {
	s := open(t, chatsettings.Config{Catalog: catalog()})
	for _, name := range []string{strings.Repeat("x", 1<<20), "evil\nINFO forged log line\x1b[31m" + strings.Repeat("y", 4096)} {
		_, err := s.SetModel("c", name)
		if err == nil {
			t.Fatal("a hostile name was allowed")
		}
		msg := err.Error()
		if len(msg) > 400 || !strings.HasSuffix(msg, "allowed: alpha, beta") || strings.ContainsAny(msg, "\n\x1b") {
			t.Errorf("refusal of a %d-byte name: %d bytes: %.300q", len(name), len(msg), msg)
		}
		_, err = s.SetEffort("c", name)
		if msg := err.Error(); len(msg) > 400 || !strings.HasSuffix(msg, "allowed: low, medium, high") {
			t.Errorf("effort refusal of a %d-byte level: %d bytes: %.300q", len(name), len(msg), msg)
		}
	}
}
