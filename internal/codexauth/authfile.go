package codexauth

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/molecule-ai/codex-warm/internal/atomicfile"
)

// Files in CODEX_HOME, as codex 0.169 names them.
const (
	// AuthFile holds codex's login.
	AuthFile = "auth.json"
	// LockFile is what codex flocks while it re-reads AuthFile and renames a new one onto it.
	LockFile = "auth.lock"
)

// Kind is the kind of login AuthFile holds.
type Kind string

// Login kinds. Only KindChatGPT has tokens the daemon refreshes; every other kind leaves codex
// to itself, as before.
const (
	KindNone    Kind = "none"    // no AuthFile
	KindAPIKey  Kind = "api_key" // OPENAI_API_KEY, no tokens
	KindChatGPT Kind = "chatgpt" // a ChatGPT login: access, refresh and id tokens
	KindOther   Kind = "other"   // a kind codex knows and the daemon does not manage
)

// Tokens is a ChatGPT login as AuthFile holds it.
type Tokens struct {
	IDToken      string
	AccessToken  string
	RefreshToken string
	// AccountID is the ChatGPT account (workspace) the tokens belong to.
	AccountID string
	// PlanType is the plan claimed by the access token ("plus", "pro", ...), or "".
	PlanType string
	// Expires is the access token's exp claim (zero: none).
	Expires time.Time
	// Issued is the access token's iat claim (zero: none).
	Issued time.Time
}

// authFile is AuthFile read with every field kept, so that writing it back changes only the
// tokens and last_refresh, whatever else a newer codex put there.
type authFile struct {
	fields map[string]json.RawMessage
	tokens map[string]json.RawMessage
	mode   fs.FileMode
}

// authPath is the file dir/AuthFile stands for: itself, or the file a symbolic link there
// points to (a login shared by linking auth.json to one file). It is read there, and replaced
// there (the temporary file in the target's directory), so the link stays a link.
func authPath(dir string) (string, error) {
	path := filepath.Join(dir, AuthFile)
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		return path, nil
	}
	target, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", fmt.Errorf("%s is a symbolic link that cannot be followed: %w", path, err)
	}
	return target, nil
}

// readAuthFile reads dir/AuthFile (following a link, see authPath). A missing file is
// fs.ErrNotExist.
func readAuthFile(dir string) (*authFile, error) {
	path, err := authPath(dir)
	if err != nil {
		return nil, err
	}
	data, err := atomicfile.ReadFile(path)
	if err != nil {
		return nil, err
	}
	af := &authFile{mode: 0o600}
	if fi, err := os.Lstat(path); err == nil {
		af.mode = fi.Mode().Perm()
	}
	if err := json.Unmarshal(data, &af.fields); err != nil || af.fields == nil {
		return nil, fmt.Errorf("%s is not a JSON object: %v", path, err)
	}
	if raw, ok := af.fields["tokens"]; ok && !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		if err := json.Unmarshal(raw, &af.tokens); err != nil {
			return nil, fmt.Errorf("%s: tokens is not an object: %v", path, err)
		}
	}
	return af, nil
}

func (af *authFile) str(m map[string]json.RawMessage, key string) string {
	var s string
	if raw, ok := m[key]; ok {
		_ = json.Unmarshal(raw, &s)
	}
	return s
}

// kind follows codex's own resolution: an explicit auth_mode wins; else an API key means
// api-key auth; else tokens mean ChatGPT.
func (af *authFile) kind() Kind {
	switch mode := af.str(af.fields, "auth_mode"); mode {
	case "chatgpt":
		return KindChatGPT
	case "apikey", "apiKey":
		return KindAPIKey
	case "":
	default:
		return KindOther
	}
	if af.str(af.fields, "OPENAI_API_KEY") != "" {
		return KindAPIKey
	}
	if af.tokens != nil && af.str(af.tokens, "refresh_token") != "" {
		return KindChatGPT
	}
	return KindNone
}

// loginTokens returns the file's ChatGPT tokens with the claims of the access token.
func (af *authFile) loginTokens() (Tokens, error) {
	t := Tokens{
		IDToken:      af.str(af.tokens, "id_token"),
		AccessToken:  af.str(af.tokens, "access_token"),
		RefreshToken: af.str(af.tokens, "refresh_token"),
		AccountID:    af.str(af.tokens, "account_id"),
	}
	if t.AccessToken == "" || t.RefreshToken == "" {
		return t, errors.New("the ChatGPT login has no access or refresh token")
	}
	if err := t.readClaims(); err != nil {
		return t, err
	}
	return t, nil
}

// setTokens puts t into the file's tokens and stamps last_refresh, as codex's persist_tokens
// does.
func (af *authFile) setTokens(t Tokens, now time.Time) {
	if af.tokens == nil {
		af.tokens = map[string]json.RawMessage{}
	}
	put := func(m map[string]json.RawMessage, k string, v any) {
		raw, _ := json.Marshal(v)
		m[k] = raw
	}
	if t.IDToken != "" {
		put(af.tokens, "id_token", t.IDToken)
	}
	put(af.tokens, "access_token", t.AccessToken)
	put(af.tokens, "refresh_token", t.RefreshToken)
	if t.AccountID != "" {
		put(af.tokens, "account_id", t.AccountID)
	}
	raw, _ := json.Marshal(af.tokens)
	af.fields["tokens"] = raw
	put(af.fields, "last_refresh", now.UTC().Format(time.RFC3339Nano))
}

// write replaces dir/AuthFile with af, keeping the file's mode. The caller holds the lock.
func (af *authFile) write(dir string) error {
	data, err := json.MarshalIndent(af.fields, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", AuthFile, err)
	}
	path, err := authPath(dir)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, data, atomicfile.Options{Perm: af.mode})
}

// readClaims fills Expires, and AccountID and PlanType when the access token claims them. A
// token that is not a JWT is an error: codex would refuse it too.
func (t *Tokens) readClaims() error {
	c, err := parseClaims(t.AccessToken)
	if err != nil {
		return fmt.Errorf("access token: %w", err)
	}
	if c.Exp > 0 {
		t.Expires = time.Unix(c.Exp, 0)
	}
	if c.Iat > 0 {
		t.Issued = time.Unix(c.Iat, 0)
	}
	if c.Auth.AccountID != "" && t.AccountID == "" {
		t.AccountID = c.Auth.AccountID
	}
	if c.Auth.PlanType != "" {
		t.PlanType = c.Auth.PlanType
	}
	return nil
}

// claims are the JWT claims codex reads from a ChatGPT access token.
type claims struct {
	Exp  int64 `json:"exp"`
	Iat  int64 `json:"iat"`
	Auth struct {
		AccountID string `json:"chatgpt_account_id"`
		PlanType  string `json:"chatgpt_plan_type"`
	} `json:"https://api.openai.com/auth"`
}

// parseClaims decodes the payload of a JWT without checking its signature (codex does not
// either; the token is only ever sent back to the service that issued it).
func parseClaims(jwt string) (claims, error) {
	var c claims
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return c, errors.New("not a JWT (want header.payload.signature)")
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return c, fmt.Errorf("JWT payload: %w", err)
	}
	if err := json.Unmarshal(payload, &c); err != nil {
		return c, fmt.Errorf("JWT payload: %w", err)
	}
	return c, nil
}
