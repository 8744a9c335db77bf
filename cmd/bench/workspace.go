package main

import (
	"fmt"
	"os"
	"path/filepath"
)

// workspace is the bench's scratch root. Every CODEX_HOME, cwd and state directory lives under
// it, which is also how the final leftover check recognises codex processes the bench started:
// their environment names a CODEX_HOME below root.
type workspace struct {
	root string
	seq  int
}

func newWorkspace() (*workspace, error) {
	root, err := os.MkdirTemp("", "codex-warm-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench workspace: %w", err)
	}
	return &workspace{root: root}, nil
}

// side is the private environment of one side of a comparison: its own CODEX_HOME pointing at a
// mock model, and its own working directory, so neither side can profit from the other's files.
type side struct {
	name      string
	codexHome string
	cwd       string
	dir       string // parent of both, for anything else the side needs (daemon state)
}

// newSide makes the directories of a side and points its CODEX_HOME at mock.
func (w *workspace) newSide(name string, mock model) (side, error) {
	w.seq++
	dir := filepath.Join(w.root, fmt.Sprintf("%02d-%s", w.seq, name))
	s := side{name: name, dir: dir, codexHome: filepath.Join(dir, "codex-home"), cwd: filepath.Join(dir, "cwd")}
	for _, d := range []string{s.codexHome, s.cwd} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return side{}, fmt.Errorf("side %s: %w", name, err)
		}
	}
	if err := mock.WriteCodexHome(s.codexHome); err != nil {
		return side{}, fmt.Errorf("side %s: %w", name, err)
	}
	return s, nil
}

// codexHomeEnvPrefix is the environment entry every codex process the bench starts carries.
func (w *workspace) codexHomeEnvPrefix() string {
	return "CODEX_HOME=" + w.root + string(filepath.Separator)
}

// markerEnv is an environment entry the bench puts on the processes it starts that run no codex
// (the daemon, the mock model), so the leftover check finds them too.
func (w *workspace) markerEnv() string {
	return "CODEX_WARM_BENCH_ROOT=" + w.root
}

// caFile is where a mock serving TLS writes its CA; every codex process the bench starts has
// SSL_CERT_FILE naming it. Comparisons run one after another, each with a mock of its own,
// which writes its CA there before any codex of that comparison starts.
func (w *workspace) caFile() string {
	return filepath.Join(w.root, "mock-ca.pem")
}

func (w *workspace) remove() error {
	return os.RemoveAll(w.root)
}
