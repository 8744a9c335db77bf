package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/molecule"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// statusTimeout bounds one `supervisor status` run.
const statusTimeout = 10 * time.Second

// StatusDoc is the part of `supervisor status --json` the tools read (cmd/supervisor's
// StatusDoc, which a main package cannot export).
type StatusDoc struct {
	Daemon struct {
		PID        int    `json:"pid"`
		Listen     string `json:"listen"`
		Goroutines int    `json:"goroutines"`
		RSSBytes   int64  `json:"rss_bytes"`
		HeapBytes  uint64 `json:"heap_bytes"`
	} `json:"daemon"`
	Snapshot supervisor.Snapshot `json:"snapshot"`
	Bridge   *molecule.Stats     `json:"bridge"`
}

// StatusClient asks a daemon for its status the way an operator does: `supervisor status --json
// --state-dir D`, which reaches the daemon over the control socket in its state directory.
type StatusClient struct {
	Bin      string
	StateDir string
	// Env is the environment of the status command (nil: the tool's own).
	Env []string
}

// Get runs `supervisor status --json` once.
func (c StatusClient) Get(ctx context.Context) (StatusDoc, error) {
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.Bin, "status", "--json", "--state-dir", c.StateDir)
	cmd.Env = c.Env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return StatusDoc{}, fmt.Errorf("supervisor status: %w: %s", err, strings.TrimSpace(errb.String()))
	}
	var doc StatusDoc
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		return StatusDoc{}, fmt.Errorf("supervisor status: decode: %w", err)
	}
	return doc, nil
}
