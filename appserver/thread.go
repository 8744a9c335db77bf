package appserver

// Threads: the account and configuration reads, and thread/start and thread/resume.

import (
	"context"
	"errors"
	"fmt"

	"github.com/sourcegraph/jsonrpc2"
	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// ThreadOptions are the settings of thread/start and thread/resume. Empty fields are left to
// codex's configuration.
type ThreadOptions struct {
	Cwd                   string
	ApprovalPolicy        string // "never" | "on-request" | "on-failure" | "untrusted"
	Sandbox               string // "read-only" | "workspace-write" | "danger-full-access"
	Model                 string
	BaseInstructions      string
	DeveloperInstructions string
}

// ReadAccount asks codex which credentials it would use and whether its model provider needs an
// OpenAI login (account/read). The daemon's start-up check tells "not logged in" from "a
// provider that needs no login" with it.
func (c *Client) ReadAccount(ctx context.Context) (protocol.AccountReadResult, error) {
	var res protocol.AccountReadResult
	if err := c.call(ctx, protocol.MethodAccountRead, protocol.AccountReadParams{}, &res); err != nil {
		return protocol.AccountReadResult{}, fmt.Errorf("read account: %w", err)
	}
	return res, nil
}

// ReadConfig asks codex for its effective config (config/read) as seen from cwd (empty: no
// project layers): what CODEX_HOME/config.toml and the -c overrides add up to.
func (c *Client) ReadConfig(ctx context.Context, cwd string) (protocol.ConfigReadResult, error) {
	var res protocol.ConfigReadResult
	if err := c.call(ctx, protocol.MethodConfigRead, protocol.ConfigReadParams{Cwd: cwd}, &res); err != nil {
		return protocol.ConfigReadResult{}, fmt.Errorf("read config: %w", err)
	}
	return res, nil
}

// StartThread starts a new thread and returns its id. It holds the turn gate like a turn: codex
// loads its configuration for it and refuses it when the ChatGPT token is swapped meanwhile.
func (c *Client) StartThread(ctx context.Context, opts ThreadOptions) (threadID string, err error) {
	if err := c.gate.enter(ctx); err != nil {
		return "", fmt.Errorf("start thread on codex pid %d: %w", c.pid, err)
	}
	defer c.gate.leave()
	var res protocol.ThreadResult
	err = c.call(ctx, protocol.MethodThreadStart, protocol.ThreadStartParams{
		Cwd:                   opts.Cwd,
		ApprovalPolicy:        opts.ApprovalPolicy,
		Sandbox:               opts.Sandbox,
		Model:                 opts.Model,
		BaseInstructions:      opts.BaseInstructions,
		DeveloperInstructions: opts.DeveloperInstructions,
		DynamicTools:          c.cfg.DynamicTools,
	}, &res)
	if err != nil {
		return "", fmt.Errorf("start thread: %w", err)
	}
	if res.Thread.ID == "" {
		return "", fmt.Errorf("start thread on codex pid %d: %w: result has no thread id", c.pid, ErrProtocol)
	}
	c.logger().Debug("thread started", zap.String("thread", res.Thread.ID))
	return res.Thread.ID, nil
}

// ResumeThread loads an existing thread (one this or an earlier process ran, or one `codex exec`
// created) so that turns continue its conversation. An unknown thread yields an error wrapping
// ErrThreadNotFound: codex answers -32600 ("no rollout found", "thread not found") for it.
// The result's turns are not asked for (excludeTurns): nothing here reads them, and hydrating a
// long thread's full history on every resume is what codex deprecates. LastTurn reads the one
// turn that matters after a crash.
func (c *Client) ResumeThread(ctx context.Context, threadID string, opts ThreadOptions) error {
	// Like StartThread, it holds the turn gate against a token push while codex loads the thread.
	if err := c.gate.enter(ctx); err != nil {
		return fmt.Errorf("resume thread %s on codex pid %d: %w", threadID, c.pid, err)
	}
	defer c.gate.leave()
	var res protocol.ThreadResult
	err := c.call(ctx, protocol.MethodThreadResume, protocol.ThreadResumeParams{
		ThreadID:              threadID,
		ExcludeTurns:          true,
		Cwd:                   opts.Cwd,
		ApprovalPolicy:        opts.ApprovalPolicy,
		Sandbox:               opts.Sandbox,
		Model:                 opts.Model,
		BaseInstructions:      opts.BaseInstructions,
		DeveloperInstructions: opts.DeveloperInstructions,
	}, &res)
	var re *jsonrpc2.Error
	if errors.As(err, &re) && re.Code == protocol.CodeInvalidRequest {
		return fmt.Errorf("resume thread %s on codex pid %d: %w: %s", threadID, c.pid, ErrThreadNotFound, re.Message)
	}
	if err != nil {
		return fmt.Errorf("resume thread %s: %w", threadID, err)
	}
	c.logger().Debug("thread resumed", zap.String("thread", threadID))
	return nil
}
