package molecule

import (
	"fmt"
	"net/http"

	"github.com/molecule-ai/codex-warm/bridge/molecule/platform"
)

// CodexAuthSecret is the secret holding a Molecule workspace's ChatGPT login: the contents of
// codex's auth.json, rotated by the platform alone (workspace-server/internal/codexauth).
const CodexAuthSecret = "CODEX_AUTH_JSON"

// SecretsReader reads one secret of the workspace from the platform (the client's).
type SecretsReader = platform.SecretsReader

// ErrNoSecret means the platform answered and the workspace has no such secret.
var ErrNoSecret = platform.ErrNoSecret

// NewSecretsReader uses cfg's platform URL, workspace, token, org id, RequestTimeout and
// HTTPClient (nil: a private client).
func NewSecretsReader(cfg Config) (*SecretsReader, error) {
	cfg = cfg.withDefaults()
	if !validWorkspaceID(cfg.WorkspaceID) {
		return nil, fmt.Errorf("workspace id %q is invalid: it must match %s", cfg.WorkspaceID, workspaceIDPattern)
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	return platform.NewSecretsReader(clientOptions(cfg), hc)
}

// clientOptions are what the platform client takes of cfg.
func clientOptions(cfg Config) platform.Options {
	return platform.Options{URL: cfg.PlatformURL, WorkspaceID: cfg.WorkspaceID, Token: cfg.Token, TokenFile: cfg.TokenFile,
		OrgID: cfg.OrgID, RequestTimeout: cfg.RequestTimeout, PeerTurnTimeout: cfg.PeerTurnTimeout,
		MaxRowBytes: int64(cfg.MaxRowBytes), Secrets: cfg.Secrets}
}
