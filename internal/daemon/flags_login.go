package daemon

import (
	"fmt"
	"slices"
	"time"

	"github.com/molecule-ai/codex-warm/internal/codexauth"
)

// loginFlags are who renews a ChatGPT login, and how (docs/login.md).
func loginFlags(e *envFlags, c *Config) func() error {
	e.str(&c.ChatGPTTokens, "chatgpt-tokens", "CODEX_WARM_CHATGPT_TOKENS", "auto", "who renews a ChatGPT login: auto (the platform when it provides the login: CODEX_AUTH_JSON in the environment or in the Molecule workspace's secrets; else the daemon), platform (the daemon only reads the platform's login and never refreshes it), own (the daemon refreshes the login in CODEX_HOME once for every codex child and writes it back), off (each child refreshes its own)")
	e.dur(&c.ChatGPTPlatformCheck, "chatgpt-platform-check", "CODEX_WARM_CHATGPT_PLATFORM_CHECK", codexauth.DefaultPlatformCheck, "read a ChatGPT login the platform owns again this often, and hand a renewed one to every codex child")
	e.dur(&c.TokenRefreshAhead, "token-refresh-ahead", "CODEX_WARM_TOKEN_REFRESH_AHEAD", 5*time.Minute, "refresh the daemon-held ChatGPT access token this long before it expires")
	return func() error {
		switch {
		case !slices.Contains([]string{tokensAuto, tokensPlatform, tokensOwn, tokensOff}, c.ChatGPTTokens):
			return fmt.Errorf("--chatgpt-tokens %q: want auto, platform, own or off", c.ChatGPTTokens)
		case c.ChatGPTPlatformCheck <= 0:
			return fmt.Errorf("--chatgpt-platform-check %s: must be > 0", c.ChatGPTPlatformCheck)
		case c.TokenRefreshAhead <= 0:
			return fmt.Errorf("--token-refresh-ahead %s: must be > 0", c.TokenRefreshAhead)
		}
		return nil
	}
}
