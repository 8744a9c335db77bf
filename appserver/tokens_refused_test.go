package appserver_test

import (
	"context"
	"sync"
	"testing"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/appserver/appservertest"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// tokenCounter is a TokenSource that hands out a new access token on every refresh.
type tokenCounter struct {
	mu        sync.Mutex
	current   string
	refreshes int
}

func (s *tokenCounter) Login() protocol.ChatGPTAuthTokens {
	s.mu.Lock()
	defer s.mu.Unlock()
	return protocol.ChatGPTAuthTokens{Type: protocol.LoginTypeChatGPTAuthTokens, AccessToken: s.current, ChatGPTAccountID: "acct"}
}

func (s *tokenCounter) Refresh(context.Context, string) (protocol.ChatGPTAuthTokens, error) {
	s.mu.Lock()
	s.refreshes++
	s.current = "token-" + string(rune('a'+s.refreshes))
	s.mu.Unlock()
	return s.Login(), nil
}

func (s *tokenCounter) Subscribe(func()) func() { return func() {} }

// codex 0.171 may take the token renewal of a turn's first 401 while it loads its configuration
// for turn/start, and refuse the turn/start ("failed to load configuration: application network
// permission was revoked"): no turn exists, so the client asks again, once, and the message is
// answered (seen in a full-disk login test beside two busy loops: the chat's reply was an HTTP 500).
func TestFakeTurnStartRefusedAfterRenewalIsAskedAgain(t *testing.T) {
	noLeaks(t)
	tokens := &tokenCounter{current: "token-a"}
	c, ctx, thread := startFakeThread(t, appservertest.FakeRefreshOnStart, func(cfg *appserver.Config) { cfg.Tokens = tokens })
	res, err := c.RunTurn(ctx, thread, text("hi"), appserver.TurnOptions{})
	if err != nil {
		t.Fatalf("turn after the refused turn/start: %v", err)
	}
	if res.Status != protocol.TurnCompleted || replyOf(res) != "reply #1: hi" {
		t.Errorf("status %q reply %q, want the thread's first turn completed", res.Status, replyOf(res))
	}
	tokens.mu.Lock()
	defer tokens.mu.Unlock()
	if tokens.refreshes != 1 {
		t.Errorf("%d refreshes, want the one codex asked for", tokens.refreshes)
	}
}
