package main

import (
	"context"
	"fmt"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/protocol"
	"github.com/molecule-ai/codex-warm/projector"
)

// warmTurnTimeout bounds one turn on a warm client.
const warmTurnTimeout = 2 * time.Minute

// warmConfig says how to start a bare app-server client.
type warmConfig struct {
	// Bin and Args start the child; Args nil means the native binary's ["app-server"]. The node
	// wrapper is started as Bin "node", Args [codex.js, "app-server"].
	Bin  string
	Args []string
	// ConfigOverrides are codex -c settings (the daemon's lean settings, for a like-for-like
	// comparison with the daemon's children).
	ConfigOverrides []string
	// DynamicTools are client-defined tools declared to codex (the daemon's send_file, for a
	// like-for-like comparison: they are part of every model request).
	DynamicTools []protocol.DynamicToolSpec
	Side         side
}

// warmClient is a bare appserver client on one thread: the warm path without the daemon around
// it.
type warmClient struct {
	side      side
	client    *appserver.Client
	threadID  string
	lastReply string
}

// startWarm starts the child, completes the handshake and starts a thread (threadID empty) or
// resumes one.
func startWarm(ctx context.Context, cfg warmConfig, threadID string) (*warmClient, error) {
	c, err := appserver.Start(ctx, appserver.Config{
		Bin:             cfg.Bin,
		Args:            cfg.Args,
		ConfigOverrides: cfg.ConfigOverrides,
		DynamicTools:    cfg.DynamicTools,
		CodexHome:       cfg.Side.codexHome,
		Dir:             cfg.Side.cwd,
		ClientInfo:      protocol.ClientInfo{Name: "codex-warm-bench", Title: "codex-warm bench", Version: "dev"},
		// As the daemon configures its children, so the bare side does the same work.
		OptOutNotifications: []string{protocol.NotifyAgentMessageDelta},
	})
	if err != nil {
		return nil, fmt.Errorf("warm client (%s): %w", cfg.Side.name, err)
	}
	w := &warmClient{side: cfg.Side, client: c, threadID: threadID}
	opts := appserver.ThreadOptions{Cwd: cfg.Side.cwd}
	if threadID == "" {
		w.threadID, err = c.StartThread(ctx, opts)
	} else {
		err = c.ResumeThread(ctx, threadID, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("warm client (%s): %w", cfg.Side.name, joinClose(err, c.Close()))
	}
	return w, nil
}

// send runs one turn and returns its wall time as seen by the caller.
func (w *warmClient) send(ctx context.Context, prompt string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, warmTurnTimeout)
	defer cancel()
	start := time.Now()
	res, err := w.client.RunTurn(ctx, w.threadID, []protocol.UserInput{{Type: "text", Text: prompt}}, appserver.TurnOptions{})
	wall := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("warm turn (%s): %w", w.side.name, err)
	}
	if res.Status != protocol.TurnCompleted {
		return 0, fmt.Errorf("warm turn (%s): status %s", w.side.name, res.Status)
	}
	reply := projector.Project(res.Notifications).Reply
	if err := checkReply(reply, prompt); err != nil {
		return 0, fmt.Errorf("warm turn (%s): %w", w.side.name, err)
	}
	w.lastReply = reply
	return wall, nil
}

// pid is the child's pid (the node wrapper's, when started through it).
func (w *warmClient) pid() int { return w.client.PID() }

// close stops and reaps the child.
func (w *warmClient) close() error {
	if err := w.client.Close(); err != nil {
		return fmt.Errorf("close warm client (%s): %w", w.side.name, err)
	}
	return nil
}

// joinClose adds a close error to err without hiding err.
func joinClose(err, closeErr error) error {
	if closeErr == nil {
		return err
	}
	return fmt.Errorf("%w (and close: %v)", err, closeErr)
}
