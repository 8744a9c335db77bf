package daemon

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/molecule-ai/codex-warm/bridge/local"
	"github.com/molecule-ai/codex-warm/bridge/molecule"
)

// inboxFlags are where messages come from, and the local inbox's listener and its guards.
func inboxFlags(e *envFlags, c *Config) func() error {
	e.str(&c.Inbox, "inbox", "CODEX_WARM_INBOX", "", "molecule or local; default: molecule when the platform URL is set (MOLECULE_API_URL, MOLECULE_URL, PLATFORM_URL or MOLECULE_PLATFORM_URL), else local")
	e.str(&c.Listen, "listen", "CODEX_WARM_LISTEN", "127.0.0.1:8377", "address of the local inbox HTTP API")
	var tokenFile string
	// Not bound through e.str: a flag default is printed by -h, and this one is a secret.
	e.fs.StringVar(&c.InboxToken, "inbox-token", "", "bearer token the local inbox requires on every request (env CODEX_WARM_INBOX_TOKEN; prefer it or --inbox-token-file: a flag shows in ps)")
	e.str(&tokenFile, "inbox-token-file", "CODEX_WARM_INBOX_TOKEN_FILE", "", "file holding the local inbox token")
	var origins listFlag
	e.fs.Var(&origins, "inbox-allow-origin", "Origin the local inbox accepts (scheme://host[:port]; repeatable); requests with any other Origin header are refused")
	e.int(&c.InboxMaxConns, "inbox-max-conns", "CODEX_WARM_INBOX_MAX_CONNS", local.DefaultMaxConns, "open connections to the local inbox; more are answered 503 at once")
	e.dur(&c.InboxBodyTimeout, "inbox-body-timeout", "CODEX_WARM_INBOX_BODY_TIMEOUT", local.DefaultBodyTimeout, "time a local inbox client has to send its headers, and then its body")
	e.dur(&c.InboxWriteTimeout, "inbox-write-timeout", "CODEX_WARM_INBOX_WRITE_TIMEOUT", local.DefaultWriteTimeout, "time a local inbox client has to take each write of its answer (the answer, or one event of a stream); one that stops reading is disconnected")
	return func() error {
		c.InboxAllowOrigins = origins
		if c.InboxToken == "" {
			c.InboxToken = e.getenv("CODEX_WARM_INBOX_TOKEN")
		}
		if c.Inbox == "" {
			c.Inbox = "local"
			if name, _ := molecule.FirstEnv(e.getenv, molecule.PlatformURLEnv); name != "" {
				c.Inbox = "molecule"
			}
		}
		switch {
		case c.Inbox != "local" && c.Inbox != "molecule":
			return fmt.Errorf("--inbox %q: want molecule or local", c.Inbox)
		case c.InboxMaxConns < 1:
			return fmt.Errorf("--inbox-max-conns %d: must be >= 1", c.InboxMaxConns)
		}
		if err := positive(durFlag{"inbox-body-timeout", c.InboxBodyTimeout}, durFlag{"inbox-write-timeout", c.InboxWriteTimeout}); err != nil {
			return err
		}
		return c.resolveInboxAccess(tokenFile)
	}
}

// resolveInboxAccess reads the inbox token and refuses a local inbox that other machines could
// reach without one.
func (c *Config) resolveInboxAccess(tokenFile string) error {
	switch {
	case c.InboxToken != "" && tokenFile != "":
		return errors.New("set either --inbox-token (CODEX_WARM_INBOX_TOKEN) or --inbox-token-file (CODEX_WARM_INBOX_TOKEN_FILE), not both")
	case tokenFile != "":
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return fmt.Errorf("inbox token file: %w", err)
		}
		c.InboxToken = strings.TrimSpace(string(b))
		if c.InboxToken == "" {
			return fmt.Errorf("inbox token file %s is empty", tokenFile)
		}
	}
	c.InboxToken = strings.TrimSpace(c.InboxToken)
	if strings.ContainsAny(c.InboxToken, "\r\n") {
		return errors.New("the inbox token contains a line break")
	}
	if c.Inbox != "local" {
		return nil
	}
	if err := local.CheckListenAddress(c.Listen, c.InboxToken != ""); err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	if h, _, _ := net.SplitHostPort(c.Listen); h != "" && !local.IsLoopbackHost(h) {
		c.InboxAllowHosts = []string{h}
	}
	return nil
}
