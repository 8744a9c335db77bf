package chatsettings

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/molecule-ai/codex-warm/internal/atomicfile"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// FileName is the settings file in the state directory.
const FileName = "chat-settings.json"

// fileVersion is the version of the file's format this daemon writes and reads.
const fileVersion = 1

// Default is the word that clears a chat's choice (/model default, /effort default).
const Default = "default"

// Source says where a turn's model or effort comes from.
type Source string

// Sources, in order of precedence.
const (
	FromChat      Source = "this chat"
	FromOperator  Source = "the operator"
	FromWorkspace Source = "the workspace"
	FromCodex     Source = "codex's config"
	// FromModel is an effort that is the model's own default (the catalog's).
	FromModel Source = "the model's default"
)

// Config is what a Store checks choices against and falls back to.
type Config struct {
	// Path is the settings file; empty keeps the choices in memory only.
	Path string
	// Catalog is codex's model/list answer, hidden models included (their Hidden set).
	Catalog []protocol.Model
	// AllowHidden lets a chat choose a model the catalog hides.
	AllowHidden bool
	// CustomProvider is set when codex's model provider is not OpenAI's: the catalog then does
	// not say what the provider serves, and only AllowModels and the configured default count.
	CustomProvider bool
	// AllowModels, when not empty, are the only models a chat may choose besides the
	// configured default (--allow-models); they need not be in the catalog.
	AllowModels []string
	// AllowEfforts are the efforts a chat may choose for a model the catalog does not describe
	// (or every model, with a custom provider).
	AllowEfforts []string
	// Operator is --model and --effort; Workspace is the Molecule workspace's model; Codex is
	// codex's config (model, model_reasoning_effort). Empty fields are not set.
	Operator  Choice
	Workspace string
	Codex     Choice
}

// Choice is a chat's choice (or a layer's setting): empty fields are not chosen.
type Choice struct {
	Model  string `json:"model,omitempty"`
	Effort string `json:"effort,omitempty"`
}

// Resolved is what a chat's turns run with, and why.
type Resolved struct {
	Model      string `json:"model,omitempty"`
	ModelFrom  Source `json:"model_from,omitempty"`
	Effort     string `json:"effort,omitempty"`
	EffortFrom Source `json:"effort_from,omitempty"`
	// Chosen is the chat's own choice.
	Chosen Choice `json:"chosen"`
}

// NotAllowedError refuses a model or an effort; Allowed says what may be chosen.
type NotAllowedError struct {
	What    string // "model" or "effort"
	Name    string
	Model   string // for an effort: the model it was checked against
	Allowed []string
}

func (e *NotAllowedError) Error() string {
	allowed := "nothing but default"
	if len(e.Allowed) > 0 {
		allowed = strings.Join(e.Allowed, ", ")
	}
	if e.What == "effort" {
		return fmt.Sprintf("effort %q is not allowed with model %s; allowed: %s", capName(e.Name), orUnknown(e.Model), allowed)
	}
	return fmt.Sprintf("model %q is not allowed; allowed: %s", capName(e.Name), allowed)
}

// maxNameInError caps a refused name echoed in an error: the name is the chat's text, which may
// be as long as a message, and the refusal must still name what is allowed.
const maxNameInError = 64

// capName cuts name to maxNameInError bytes, on a rune boundary, marked with "…".
func capName(name string) string {
	if len(name) <= maxNameInError {
		return name
	}
	cut := maxNameInError
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return name[:cut] + "…"
}

func orUnknown(s string) string {
	if s == "" {
		return "(codex's default)"
	}
	return s
}

// Store holds every chat's choice. It is safe for concurrent use.
type Store struct {
	cfg Config

	mu    sync.Mutex
	chats map[string]Choice
}

// Open reads the settings file at cfg.Path (a missing one holds no choice).
func Open(cfg Config) (*Store, error) {
	s := &Store{cfg: cfg, chats: map[string]Choice{}}
	if cfg.Path == "" {
		return s, nil
	}
	b, err := atomicfile.ReadFile(cfg.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil // an older state directory
	}
	if err != nil {
		return nil, fmt.Errorf("chat settings: %w", err)
	}
	var f file
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("chat settings: %s: %w", cfg.Path, err)
	}
	if f.Version != fileVersion {
		return nil, fmt.Errorf("chat settings: %s: version %d, this daemon reads %d", cfg.Path, f.Version, fileVersion)
	}
	for k, c := range f.Chats {
		if c != (Choice{}) {
			s.chats[k] = c
		}
	}
	return s, nil
}

// file is the settings file's content.
type file struct {
	Version int               `json:"version"`
	Chats   map[string]Choice `json:"chats"`
}

// PathIn is the settings file of state directory dir.
func PathIn(dir string) string { return filepath.Join(dir, FileName) }

// writeLocked writes every choice to the file.
func (s *Store) writeLocked() error {
	if s.cfg.Path == "" {
		return nil
	}
	b, err := json.MarshalIndent(file{Version: fileVersion, Chats: s.chats}, "", "  ")
	if err != nil {
		return fmt.Errorf("chat settings: %w", err)
	}
	if err := atomicfile.WriteFile(s.cfg.Path, append(b, '\n'), atomicfile.Options{Perm: 0o600}); err != nil {
		return fmt.Errorf("chat settings: %w", err)
	}
	return nil
}

// set stores chatKey's choice (an empty one forgets the chat) and writes the file; on a failed
// write the previous choice stays.
func (s *Store) setLocked(chatKey string, c Choice) error {
	old, had := s.chats[chatKey]
	if c == (Choice{}) {
		delete(s.chats, chatKey)
	} else {
		s.chats[chatKey] = c
	}
	if err := s.writeLocked(); err != nil {
		if had {
			s.chats[chatKey] = old
		} else {
			delete(s.chats, chatKey)
		}
		return fmt.Errorf("chat %s: %w", chatKey, err)
	}
	return nil
}

// Forget drops chatKey's choice (the chat's retention ended it).
func (s *Store) Forget(chatKey string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.chats[chatKey]; !ok {
		return nil
	}
	return s.setLocked(chatKey, Choice{})
}

// Chosen returns every chat's choice, for the status.
func (s *Store) Chosen() map[string]Choice {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.chats)
}

// Turn returns the model and effort chatKey's next turn runs with ("" for what nobody set
// and the daemon cannot tell: codex then keeps what the thread has).
func (s *Store) Turn(chatKey string) (model, effort string) {
	r := s.Resolve(chatKey)
	return r.Model, r.Effort
}

// Resolve says what chatKey's turns run with, and where each comes from.
func (s *Store) Resolve(chatKey string) Resolved {
	s.mu.Lock()
	c := s.chats[chatKey]
	s.mu.Unlock()
	return s.resolve(c)
}

func (s *Store) resolve(c Choice) Resolved {
	r := Resolved{Chosen: c}
	r.Model, r.ModelFrom = s.configuredModel()
	// A choice the operator no longer allows (--allow-models changed since) is passed over.
	if c.Model != "" && slices.Contains(s.AllowedModels(), c.Model) {
		r.Model, r.ModelFrom = c.Model, FromChat
	}
	efforts, known := s.efforts(r.Model)
	for _, l := range []struct {
		effort string
		from   Source
	}{{c.Effort, FromChat}, {s.cfg.Operator.Effort, FromOperator}, {s.cfg.Codex.Effort, FromCodex}} {
		if l.effort != "" && (!known || slices.Contains(efforts, l.effort)) {
			r.Effort, r.EffortFrom = l.effort, l.from
			return r
		}
	}
	if m, ok := s.entry(r.Model); ok && m.DefaultReasoningEffort != "" {
		r.Effort, r.EffortFrom = m.DefaultReasoningEffort, FromModel
	}
	return r
}

// configuredModel is the model a chat without a choice runs on, and where it comes from: the
// operator's, the workspace's, codex's config, else the catalog's default.
func (s *Store) configuredModel() (string, Source) {
	switch {
	case s.cfg.Operator.Model != "":
		return s.cfg.Operator.Model, FromOperator
	case s.cfg.Workspace != "":
		return s.cfg.Workspace, FromWorkspace
	case s.cfg.Codex.Model != "":
		return s.cfg.Codex.Model, FromCodex
	}
	if s.cfg.CustomProvider {
		return "", FromCodex
	}
	for _, m := range s.cfg.Catalog {
		if m.IsDefault {
			return m.ID, FromCodex
		}
	}
	return "", FromCodex
}

// entry is model's catalog entry, when the catalog describes what the provider serves.
func (s *Store) entry(model string) (protocol.Model, bool) {
	if s.cfg.CustomProvider || model == "" {
		return protocol.Model{}, false
	}
	i := slices.IndexFunc(s.cfg.Catalog, func(m protocol.Model) bool { return m.ID == model })
	if i < 0 {
		return protocol.Model{}, false
	}
	return s.cfg.Catalog[i], true
}

// efforts are the efforts model takes; known is false when nobody says (no catalog entry and
// no operator list): then any effort an operator configured passes.
func (s *Store) efforts(model string) (efforts []string, known bool) {
	if m, ok := s.entry(model); ok {
		for _, e := range m.SupportedReasoningEfforts {
			efforts = append(efforts, e.ReasoningEffort)
		}
		return efforts, true
	}
	return s.cfg.AllowEfforts, len(s.cfg.AllowEfforts) > 0
}

// AllowedModels lists what a chat may choose, the configured default first.
func (s *Store) AllowedModels() []string {
	def, _ := s.configuredModel()
	var out []string
	if def != "" {
		out = append(out, def)
	}
	switch {
	case len(s.cfg.AllowModels) > 0:
		out = append(out, s.cfg.AllowModels...)
	case !s.cfg.CustomProvider:
		for _, m := range s.cfg.Catalog {
			if !m.Hidden || s.cfg.AllowHidden {
				out = append(out, m.ID)
			}
		}
	}
	seen := map[string]bool{}
	return slices.DeleteFunc(out, func(m string) bool {
		dup := seen[m]
		seen[m] = true
		return dup
	})
}

// AllowedEfforts lists the efforts a chat may choose with model.
func (s *Store) AllowedEfforts(model string) []string {
	e, _ := s.efforts(model)
	return slices.Clone(e)
}
