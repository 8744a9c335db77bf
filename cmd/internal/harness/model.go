package harness

import (
	"errors"
	"fmt"
	"os"

	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// StartModel starts a mock model and makes codexHome (created if missing) a CODEX_HOME that
// points codex at it and keeps codex offline.
func StartModel(cfg mockmodel.Config, codexHome string) (*mockmodel.Model, error) {
	if err := os.MkdirAll(codexHome, 0o700); err != nil {
		return nil, fmt.Errorf("mock model: create codex home: %w", err)
	}
	m, err := mockmodel.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("mock model: %w", err)
	}
	if err := m.WriteCodexHome(codexHome); err != nil {
		return nil, errors.Join(err, m.Close())
	}
	return m, nil
}
