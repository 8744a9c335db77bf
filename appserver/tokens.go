package appserver

import (
	"context"
	"fmt"
	"time"

	"github.com/sourcegraph/jsonrpc2"
	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// TokenSource hands children the ChatGPT login the daemon holds (a *codexauth.Manager), so that
// no child refreshes it on its own: children sharing one login would spend one refresh token
// many times.
type TokenSource interface {
	// Login is the access token to log a child in with.
	Login() protocol.ChatGPTAuthTokens
	// Refresh answers a child whose token stale the model refused: a newer token, shared by
	// every child asking at once.
	Refresh(ctx context.Context, stale string) (protocol.ChatGPTAuthTokens, error)
	// Subscribe calls kick, which must not block, whenever Login changes.
	Subscribe(kick func()) (stop func())
}

// Bounds of the token exchange with a child.
const (
	// tokenAnswerTimeout bounds the answer to a child's refresh request: codex gives up after
	// 10 s and fails the turn with "auth refresh request timed out".
	tokenAnswerTimeout = 9 * time.Second
	// tokenPushTimeout bounds one account/login/start.
	tokenPushTimeout = 30 * time.Second
)

// ephemeralCredentials keeps a child away from auth.json: it neither reads the file nor calls
// the token endpoint, even when the file holds an expired login.
const ephemeralCredentials = `cli_auth_credentials_store="ephemeral"`

// TokenRefreshError is the error of a turn that failed because the daemon could not give the
// child a new token when the model refused the old one. Err says why (codexauth.ErrLoginGone
// when the login is gone for good).
type TokenRefreshError struct {
	PID int
	Err error
}

func (e *TokenRefreshError) Error() string {
	return fmt.Sprintf("codex pid %d: the model refused the ChatGPT token and no new one could be had: %v", e.PID, e.Err)
}

// Unwrap returns the refresh failure.
func (e *TokenRefreshError) Unwrap() error { return e.Err }

// logIn sends the current token (account/login/start) and remembers it as the child's.
func (c *Client) logIn(ctx context.Context) error {
	l := c.cfg.Tokens.Login()
	var res map[string]any
	if err := c.call(ctx, protocol.MethodLoginStart, l, &res); err != nil {
		return fmt.Errorf("log codex pid %d in with the daemon's ChatGPT token: %w", c.pid, err)
	}
	c.setToken(l.AccessToken)
	return nil
}

// setToken records tok as the child's token.
func (c *Client) setToken(tok string) {
	c.tokenMu.Lock()
	defer c.tokenMu.Unlock()
	if tok != c.token {
		c.prevToken, c.renewedAt = c.token, time.Now()
	}
	c.token = tok
}

// refreshRaceWindow is how long after a renewal a refresh request may still be one codex sent
// for the token before it: turns of several threads meet the same 401 together and each asks,
// and the answer to the first reaches codex after the others were sent. A loaded machine
// dispatches them within milliseconds; codex itself waits 10 s for an answer.
const refreshRaceWindow = 5 * time.Second

// staleToken is the token a refresh request asks to replace: the child's, or, while several
// turns run and a renewal is recent, the one before it, so that the token source (which
// refreshes only a token it still holds) hands every such request the one new token instead
// of refreshing again for each.
func (c *Client) staleToken(turns int) string {
	c.tokenMu.Lock()
	defer c.tokenMu.Unlock()
	if turns > 1 && c.prevToken != "" && time.Since(c.renewedAt) < refreshRaceWindow {
		return c.prevToken
	}
	return c.token
}

// heldToken is the access token the child was last given.
func (c *Client) heldToken() string {
	c.tokenMu.Lock()
	defer c.tokenMu.Unlock()
	return c.token
}

// kickTokens wakes pushTokens without blocking.
func (c *Client) kickTokens() {
	select {
	case c.tokenKick <- struct{}{}:
	default:
	}
}

// pushTokens gives the child each new token the daemon gets (a refresh ahead of expiry, one
// asked for by another child, one another process wrote), so that it never meets a 401 for a
// token the daemon already replaced. It runs on a goroutine of the client until Close.
//
// A push waits for the child's running turns to end (gate): codex fails a model request in
// flight when its token is swapped under it (observed on 0.169: "application network permission
// was revoked", "application network policy is unavailable"). A turn that meets a 401 meanwhile
// asks for the token itself (answerTokenRefresh) and gets the new one at once.
//
// A child hosting several chats' threads may never be without a running turn. With
// Config.TokenPushWait set, a push that found no gap within it goes out beside the running
// turns: new turns wait for it, and a running turn it made fail before the model answered is
// run again (RunTurn's renewal rule).
func (c *Client) pushTokens() {
	defer c.wg.Done()
	stop := c.cfg.Tokens.Subscribe(c.kickTokens)
	defer stop()
	var force *time.Timer // runs while a push waits for a gap in the turns
	defer func() {
		if force != nil {
			force.Stop()
		}
	}()
	var forced <-chan time.Time
	for {
		forcing := false
		select {
		case <-c.tokenKick:
		case <-forced:
			forcing = true
		case <-c.life.Done():
			return
		}
		if c.cfg.Tokens.Login().AccessToken == c.heldToken() {
			forced = nil
			continue // up to date
		}
		alone := c.gate.tryPush()
		if !alone && forcing && c.gate.forcePush() {
			c.logger().Info("no gap in the child's turns for the new ChatGPT token; handing it over beside them",
				zap.Int("turns", c.gate.running()), zap.Duration("waited", c.cfg.TokenPushWait))
			c.markRenewed()
		} else if !alone {
			if forced == nil && c.cfg.TokenPushWait > 0 {
				// The turns' end kicks again; past the wait the push goes out anyway.
				force = time.NewTimer(c.cfg.TokenPushWait)
				forced = force.C
			}
			continue
		}
		forced = nil
		ctx, cancel := context.WithTimeout(c.life, tokenPushTimeout)
		err := c.logIn(ctx)
		cancel()
		c.gate.release()
		if err != nil && c.life.Err() == nil {
			c.logger().Warn("could not hand the new ChatGPT token to codex; it asks for one on its next 401", zap.Error(err))
		} else if err == nil {
			c.logger().Debug("new ChatGPT token handed to codex")
		}
	}
}

// answerTokenRefresh answers account/chatgptAuthTokens/refresh from the daemon's token source
// on a goroutine of its own: the answer may wait for a call to the token endpoint, and the
// dispatcher must go on meanwhile. A failure is answered with an error at once (codex would
// otherwise wait out its 10 s) and recorded for the running turn, whose failure it explains.
func (c *Client) answerTokenRefresh(req *jsonrpc2.Request, log *zap.Logger) {
	// The request names no thread: its answer is the child's, and every running turn may be
	// the one whose model refused the token.
	ts := c.runningTurns()
	stale := c.staleToken(len(ts))
	// The dispatcher is in wg while it runs, so Add cannot race with Close's Wait.
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(c.life, tokenAnswerTimeout)
		defer cancel()
		l, err := c.cfg.Tokens.Refresh(ctx, stale)
		if err != nil {
			log.Warn("no new ChatGPT token for codex", zap.Error(err))
			for _, t := range ts {
				t.setRefreshErr(err)
			}
			rerr := &jsonrpc2.Error{Code: protocol.CodeInternalError, Message: "codex-warm: " + err.Error()}
			if err := c.conn.ReplyWithError(context.Background(), req.ID, rerr); err != nil {
				log.Debug("reply to server request", zap.Error(err))
			}
			return
		}
		c.setToken(l.AccessToken)
		c.markRenewed()
		l.Type = "" // the answer has no type
		if err := c.conn.Reply(context.Background(), req.ID, l); err != nil {
			log.Debug("reply to server request", zap.Error(err))
			return
		}
		log.Info("codex got a new ChatGPT token from the daemon")
	}()
}
