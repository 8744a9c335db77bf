package molecule

import (
	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/secretset"
)

const redacted = secretset.Redacted

// redactor removes every secret the daemon holds (Config.Secrets: the workspace tokens, the
// platform's login, the workspace's secrets, the inbound secret, ...) from text that leaves:
// replies, notes, the heartbeat's fields, and the response bodies and transport errors quoted in
// logs and returned errors (a platform or proxy that echoes request headers would otherwise leak
// the token there).
type redactor struct {
	set *secretset.Set
}

// String redacts s, reading the set's live sources (auth.json) now.
func (r redactor) String(s string) string { return r.set.Redact(s) }

// Logger wraps l so every message and field it writes goes through the redactor.
func (r redactor) Logger(l *zap.Logger) *zap.Logger { return r.set.Logger(l) }
