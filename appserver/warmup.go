package appserver

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// WarmUpProvider is the model provider a child defines when Config.WarmUpURL is set: the
// daemon's canned responder on loopback (package cannedmodel), used only by WarmUp's throwaway
// turn.
const WarmUpProvider = "codex_warm_canned"

// WarmUpText is the user message of the throwaway turn; only the canned responder sees it.
const WarmUpText = "warm-up"

// ErrNoWarmUp means WarmUp was called on a child started without Config.WarmUpURL.
var ErrNoWarmUp = errors.New("no canned model provider configured for the warm-up")

// warmUpOverrides are the -c overrides that define WarmUpProvider at url. No retries: the
// responder is local, and a failed warm-up only leaves the spare less warm.
func warmUpOverrides(url string) []string {
	p := "model_providers." + WarmUpProvider + "."
	return []string{
		p + "name=" + strconv.Quote(WarmUpProvider),
		p + "base_url=" + strconv.Quote(url),
		p + `wire_api="responses"`,
		p + "request_max_retries=0",
		p + "stream_max_retries=0",
	}
}

// WarmUp pays, ahead of a chat, what the first turn of a codex process costs besides the model
// request (docs/PROTOCOL.md, "What the first turn of a process pays"):
//   - it names threadID (thread/name/set), which writes the new thread to disk (its rollout, the
//     thread history database) the way its first turn would;
//   - it runs one turn on a second thread started with `ephemeral: true` on WarmUpProvider, so
//     skills, context capture and the turn machinery are loaded, then unsubscribes that thread.
//
// In a process that already completed a turn (a shared child whose chats have talked), only
// the name is set: the process is warm, and a throwaway turn would only hold the child's turn
// gate beside its chats' turns, which holds back a new ChatGPT token's push (pushTokens) while
// a chat's next turn starts on the old one.
//
// The model never sees any of it: the throwaway turn goes to the canned responder only, the
// ephemeral thread leaves nothing in CODEX_HOME, and threadID's history stays empty. opts are
// the settings chats' threads use (cwd above all, which decides what skills and project files
// codex loads), so the same files are warmed. An error leaves the client usable.
func (c *Client) WarmUp(ctx context.Context, threadID, name string, opts ThreadOptions) error {
	if c.cfg.WarmUpURL == "" {
		return fmt.Errorf("warm up codex pid %d: %w", c.pid, ErrNoWarmUp)
	}
	if err := c.SetThreadName(ctx, threadID, name); err != nil {
		return fmt.Errorf("warm up: %w", err)
	}
	if c.turned.Load() {
		c.logger().Debug("warmed up: the process already ran a turn", zap.String("thread", threadID))
		return nil
	}
	var res protocol.ThreadResult
	err := c.call(ctx, protocol.MethodThreadStart, protocol.ThreadStartParams{
		Cwd:                   opts.Cwd,
		ApprovalPolicy:        opts.ApprovalPolicy,
		Sandbox:               opts.Sandbox,
		Model:                 opts.Model,
		ModelProvider:         WarmUpProvider,
		BaseInstructions:      opts.BaseInstructions,
		DeveloperInstructions: opts.DeveloperInstructions,
		Ephemeral:             true,
	}, &res)
	if err != nil {
		return fmt.Errorf("warm up: start ephemeral thread: %w", err)
	}
	eph := res.Thread.ID
	if eph == "" {
		return fmt.Errorf("warm up: start ephemeral thread on codex pid %d: %w: result has no thread id", c.pid, ErrProtocol)
	}
	r, err := c.runTurnGated(ctx, eph, []protocol.UserInput{{Type: "text", Text: WarmUpText}}, TurnOptions{}, true)
	if err == nil && r.Status != protocol.TurnCompleted {
		err = fmt.Errorf("throwaway turn on ephemeral thread %s ended %q: %s", eph, r.Status, turnErrorText(r))
	}
	// Unloaded whatever the turn did: a thread left loaded would hold the process's memory.
	uerr := c.call(ctx, protocol.MethodThreadUnsubscribe, protocol.ThreadIDParams{ThreadID: eph}, nil)
	if err != nil {
		return fmt.Errorf("warm up on codex pid %d: %w", c.pid, err)
	}
	if uerr != nil {
		return fmt.Errorf("warm up: unsubscribe ephemeral thread %s: %w", eph, uerr)
	}
	c.logger().Debug("warmed up", zap.String("thread", threadID), zap.String("ephemeral_thread", eph))
	return nil
}

// SetThreadName names threadID (thread/name/set). codex shows the name where it lists threads
// (`codex resume`) and keeps it in CODEX_HOME/session_index.jsonl.
func (c *Client) SetThreadName(ctx context.Context, threadID, name string) error {
	if err := c.call(ctx, protocol.MethodThreadNameSet, protocol.ThreadNameSetParams{ThreadID: threadID, Name: name}, nil); err != nil {
		return fmt.Errorf("name thread %s: %w", threadID, err)
	}
	return nil
}

// DeleteThread removes threadID from CODEX_HOME (thread/delete): its rollout file and its name.
func (c *Client) DeleteThread(ctx context.Context, threadID string) error {
	if err := c.call(ctx, protocol.MethodThreadDelete, protocol.ThreadIDParams{ThreadID: threadID}, nil); err != nil {
		return fmt.Errorf("delete thread %s: %w", threadID, err)
	}
	return nil
}
