package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/molecule-ai/codex-warm/bridge/molecule"
)

// sessionsFileName is the daemon's chat key → thread id map in its state directory.
const sessionsFileName = "sessions.json"

// readBridgeState reads the daemon's persisted inbox position. A missing file is an empty state
// (a daemon killed before its first write).
func readBridgeState(dir string) (BridgeState, error) {
	var st BridgeState
	b, err := os.ReadFile(filepath.Join(dir, molecule.StateFileName))
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("read bridge state: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("decode %s: %w", molecule.StateFileName, err)
	}
	return st, nil
}

// readSessions reads sessions.json; missing means no chat has a thread yet.
func readSessions(dir string) (map[string]string, error) {
	m := map[string]string{}
	b, err := os.ReadFile(filepath.Join(dir, sessionsFileName))
	if errors.Is(err, os.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read sessions: %w", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode %s: %w", sessionsFileName, err)
	}
	return m, nil
}
