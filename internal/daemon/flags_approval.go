package daemon

import (
	"errors"
	"fmt"

	"github.com/molecule-ai/codex-warm/supervisor"
)

// approvalFlags are how codex's approval requests are answered.
func approvalFlags(e *envFlags, c *Config) func() error {
	e.str(&c.Approval, "approval", "CODEX_WARM_APPROVAL", "decline", "answer to codex command and file-change approval requests: decline, accept, or ask (the chat answers /approve or /deny)")
	e.dur(&c.ApprovalTimeout, "approval-timeout", "CODEX_WARM_APPROVAL_TIMEOUT", supervisor.DefaultApprovalTimeout, "with --approval ask, decline an approval nobody answered this long")
	return func() error {
		switch {
		case c.Approval != "decline" && c.Approval != "accept" && c.Approval != "ask":
			return fmt.Errorf("--approval %q: want decline, accept or ask", c.Approval)
		case c.Approval == "ask" && !c.ChatCommands:
			return errors.New("--approval ask needs --chat-commands: the chat answers with /approve or /deny")
		case c.ApprovalTimeout <= 0:
			return fmt.Errorf("--approval-timeout %s: must be > 0", c.ApprovalTimeout)
		}
		return nil
	}
}
