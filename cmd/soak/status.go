package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/molecule-ai/codex-warm/bridge"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// statusDoc is the part of `supervisor status --json` the soak reads (cmd/supervisor's StatusDoc).
type statusDoc struct {
	Daemon struct {
		PID        int    `json:"pid"`
		Goroutines int    `json:"goroutines"`
		RSSBytes   int64  `json:"rss_bytes"`
		HeapBytes  uint64 `json:"heap_bytes"`
	} `json:"daemon"`
	Snapshot supervisor.Snapshot `json:"snapshot"`
	Bridge   *bridge.Stats       `json:"bridge"`
}

func (d statusDoc) sample() Sample {
	return Sample{Goroutines: d.Daemon.Goroutines, RSSBytes: d.Daemon.RSSBytes, HeapBytes: d.Daemon.HeapBytes}
}

// idle reports a daemon with nothing in flight: no unfinished rows, no pending replies, no
// running turns; with children too, no live codex child.
func (d statusDoc) idle(children bool) bool {
	b := d.Bridge
	if b == nil || b.Unacked != 0 || b.PendingReplies != 0 || b.InFlight != 0 {
		return false
	}
	return !children || d.Snapshot.Totals.Live == 0
}

// statusClient asks the daemon for its status the way an operator does: `supervisor status
// --json --state-dir D`.
type statusClient struct {
	bin      string
	stateDir string
	env      []string
}

func (c statusClient) get(ctx context.Context) (statusDoc, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, "status", "--json", "--state-dir", c.stateDir)
	cmd.Env = c.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return statusDoc{}, fmt.Errorf("supervisor status: %w: %s", err, strings.TrimSpace(errb.String()))
	}
	var doc statusDoc
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		return statusDoc{}, fmt.Errorf("decode status: %w", err)
	}
	return doc, nil
}
