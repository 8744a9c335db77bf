package chatsettings

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/molecule-ai/codex-warm/internal/atomicfile"
)

// WorkspaceConfigFile is the Molecule workspace's configuration in its configs directory.
const WorkspaceConfigFile = "config.yaml"

// WorkspaceModel is the model a Molecule workspace's codex runs on, read as the Molecule
// runtime reads it (molecule_runtime/config.py, load_config) and the codex template passes it to
// thread/start (runtime_config.model): the first of the environment variables MOLECULE_MODEL,
// MODEL and MODEL_PROVIDER (the runtime's legacy name for the same thing), then
// runtime_config.model, then the top-level model of config.yaml. The file is in
// WORKSPACE_CONFIG_PATH when that is set, else in configsDir. from names where the model came
// from; a missing file, or a file without a model, gives "" and no error.
func WorkspaceModel(getenv func(string) string, configsDir string) (model, from string, err error) {
	for _, name := range []string{"MOLECULE_MODEL", "MODEL", "MODEL_PROVIDER"} {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			return v, name, nil
		}
	}
	dir := configsDir
	if d := getenv("WORKSPACE_CONFIG_PATH"); d != "" {
		dir = d
	}
	if dir == "" {
		return "", "", nil
	}
	path := filepath.Join(dir, WorkspaceConfigFile)
	b, err := atomicfile.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("workspace model: %w", err)
	}
	model, key, err := parseWorkspaceModel(b)
	if err != nil {
		return "", "", fmt.Errorf("workspace model: %s: %w", path, err)
	}
	if model == "" {
		return "", "", nil
	}
	return model, path + " " + key, nil
}

// parseWorkspaceModel reads runtime_config.model, else model, of a config.yaml. Fields of
// other types are ignored, as the runtime's lenient parser ignores them.
func parseWorkspaceModel(b []byte) (model, key string, err error) {
	var doc struct {
		Model         any `yaml:"model"`
		RuntimeConfig any `yaml:"runtime_config"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return "", "", err
	}
	if rc, ok := doc.RuntimeConfig.(map[string]any); ok {
		if m, ok := rc["model"].(string); ok && strings.TrimSpace(m) != "" {
			return strings.TrimSpace(m), "runtime_config.model", nil
		}
	}
	if m, ok := doc.Model.(string); ok && strings.TrimSpace(m) != "" {
		return strings.TrimSpace(m), "model", nil
	}
	return "", "", nil
}
