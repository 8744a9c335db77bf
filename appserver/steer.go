package appserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sourcegraph/jsonrpc2"
	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// ErrNotSteerable is wrapped by SteerTurn's error when codex refused the input because the turn
// it named is not running any more (it just ended, or another one runs) or takes no input (a
// review or compaction: activeTurnNotSteerable). The caller can run the input as a turn of its
// own instead.
var ErrNotSteerable = errors.New("codex turn cannot take more input")

// SteerTurn adds input to the running turn expectedTurnID of threadID (turn/steer): the turn's
// model sees it with the turn's own input, and the turn's one reply answers both. It returns once
// codex accepted the input; the turn's result still comes to its RunTurn. It goes through the
// same request path as every other request, so an overloaded refusal (-32001) is sent again.
func (c *Client) SteerTurn(ctx context.Context, threadID, expectedTurnID string, input []protocol.UserInput) error {
	var res protocol.TurnSteerResult
	err := c.call(ctx, protocol.MethodTurnSteer, protocol.TurnSteerParams{
		ThreadID: threadID, Input: input, ExpectedTurnID: expectedTurnID,
	}, &res)
	var re *jsonrpc2.Error
	if errors.As(err, &re) && notSteerable(re) {
		return fmt.Errorf("steer turn %s on thread %s (codex pid %d): %w: %s", expectedTurnID, threadID, c.pid, ErrNotSteerable, re.Message)
	}
	if err != nil {
		return fmt.Errorf("steer turn %s on thread %s: %w", expectedTurnID, threadID, err)
	}
	if res.TurnID != "" && res.TurnID != expectedTurnID {
		// expectedTurnId is a precondition; a different turn taking the input would mean the
		// reply that answers it is not the one the caller waits for.
		return fmt.Errorf("steer turn %s on thread %s (codex pid %d): %w: codex answered turn %s",
			expectedTurnID, threadID, c.pid, ErrProtocol, res.TurnID)
	}
	c.logger().Debug("input added to the running turn", zap.String("thread", threadID), zap.String("turn", expectedTurnID))
	return nil
}

// notSteerable reports a turn/steer refusal: invalid request (no active turn, another turn
// active) or the activeTurnNotSteerable error kind in the error's data.
func notSteerable(re *jsonrpc2.Error) bool {
	if re.Code == protocol.CodeInvalidRequest {
		return true
	}
	if re.Data == nil {
		return false
	}
	var d struct {
		CodexErrorInfo map[string]any `json:"codexErrorInfo"`
	}
	if json.Unmarshal(*re.Data, &d) != nil {
		return false
	}
	_, ok := d.CodexErrorInfo[protocol.CodexErrorActiveTurnNotSteerable]
	return ok
}
