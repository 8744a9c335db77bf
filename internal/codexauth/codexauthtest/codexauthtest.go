// Package codexauthtest is a fake ChatGPT OAuth issuer for tests: a token endpoint on loopback
// that rotates refresh tokens as the real one does (a spent refresh token is refused with
// refresh_token_reused), mints access tokens that are well-formed JWTs with the claims codex
// reads, and can be made to fail the ways a real endpoint does: down, slow, invalid_grant, or
// an answer lost after the token was spent.
package codexauthtest

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Fault is how the endpoint misbehaves.
type Fault int

// Faults.
const (
	FaultNone         Fault = iota
	FaultDown               // 503 to every call; nothing is spent
	FaultHang               // never answers until Release or the caller gives up; nothing is spent
	FaultInvalidGrant       // 400 invalid_grant; nothing is spent
	FaultLoseAnswer         // spends the refresh token, rotates, then drops the connection unanswered
	FaultLate               // spends the refresh token, rotates, and answers only at Release (a late answer)
)

// Issuer is the fake issuer and its token endpoint.
type Issuer struct {
	srv     *http.Server
	url     string
	account string
	plan    string
	ttl     time.Duration
	release chan struct{}
	done    chan struct{}

	mu      sync.Mutex
	fault   Fault
	live    string          // the refresh token that works now
	spent   map[string]bool // refresh tokens used before
	access  string          // the access token the model accepts now
	calls   int
	reused  int
	serial  int
	waiters []chan struct{}
}

// Config configures an Issuer.
type Config struct {
	// AccountID and PlanType are claimed by every access token. Defaults "acct-test" and "plus".
	AccountID, PlanType string
	// TTL is the lifetime of each access token. Default one hour.
	TTL time.Duration
}

// New starts an Issuer on 127.0.0.1 with a first login (see Login).
func New(cfg Config) (*Issuer, error) {
	if cfg.AccountID == "" {
		cfg.AccountID = "acct-test"
	}
	if cfg.PlanType == "" {
		cfg.PlanType = "plus"
	}
	if cfg.TTL <= 0 {
		cfg.TTL = time.Hour
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	is := &Issuer{account: cfg.AccountID, plan: cfg.PlanType, ttl: cfg.TTL, spent: map[string]bool{},
		release: make(chan struct{}), done: make(chan struct{}), url: "http://" + ln.Addr().String() + "/oauth/token"}
	is.live = is.nextRefreshLocked()
	is.access = is.mintLocked(time.Now().Add(cfg.TTL))
	is.srv = &http.Server{Handler: is, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(is.done)
		_ = is.srv.Serve(ln)
	}()
	return is, nil
}

// URL is the token endpoint, for CODEX_REFRESH_TOKEN_URL_OVERRIDE.
func (is *Issuer) URL() string { return is.url }

// Close stops the endpoint; a hung call is released first.
func (is *Issuer) Close() error {
	is.Release()
	err := is.srv.Close()
	<-is.done
	return err
}

// SetFault makes the endpoint misbehave from now on (FaultNone: behave).
func (is *Issuer) SetFault(f Fault) {
	is.mu.Lock()
	is.fault = f
	is.mu.Unlock()
}

// Release answers every hung call (with 503) and stops hanging new ones.
func (is *Issuer) Release() {
	is.mu.Lock()
	defer is.mu.Unlock()
	select {
	case <-is.release:
	default:
		close(is.release)
	}
}

// Calls is the number of token calls so far; Reused how many presented a spent refresh token.
func (is *Issuer) Calls() int {
	is.mu.Lock()
	defer is.mu.Unlock()
	return is.calls
}

// Reused is the number of calls that presented a spent refresh token.
func (is *Issuer) Reused() int {
	is.mu.Lock()
	defer is.mu.Unlock()
	return is.reused
}

// WaitCalls blocks until at least n token calls arrived, or ctx is done.
func (is *Issuer) WaitCalls(ctx context.Context, n int) error {
	for {
		is.mu.Lock()
		if is.calls >= n {
			is.mu.Unlock()
			return nil
		}
		ch := make(chan struct{})
		is.waiters = append(is.waiters, ch)
		is.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d token calls (have %d): %w", n, is.Calls(), ctx.Err())
		}
	}
}

// LiveRefreshToken is the refresh token that works now.
func (is *Issuer) LiveRefreshToken() string {
	is.mu.Lock()
	defer is.mu.Unlock()
	return is.live
}

// AccessToken is the access token the model accepts now.
func (is *Issuer) AccessToken() string {
	is.mu.Lock()
	defer is.mu.Unlock()
	return is.access
}

// Accepts reports whether the model should accept bearer: only the newest access token is
// good, as after a revocation of the older ones.
func (is *Issuer) Accepts(bearer string) bool {
	is.mu.Lock()
	defer is.mu.Unlock()
	return bearer == is.access
}

// Revoke makes the current access token worthless without rotating anything, as when it
// expired or was revoked: the model refuses it until a refresh.
func (is *Issuer) Revoke() {
	is.mu.Lock()
	is.access = "revoked"
	is.mu.Unlock()
}

// RotateElsewhere spends the live refresh token as another process would, and returns the
// tokens that process got (to be written to auth.json by the test).
func (is *Issuer) RotateElsewhere() (access, refresh string) {
	is.mu.Lock()
	defer is.mu.Unlock()
	is.spent[is.live] = true
	is.live = is.nextRefreshLocked()
	// A later login expires later, as a real rotation minutes apart does: within one second of
	// the last mint the claims (whole seconds) would otherwise not tell the two apart.
	exp := time.Now().Add(is.ttl)
	if prev, ok := expiryOf(is.access); ok && exp.Unix() <= prev.Unix() {
		exp = prev.Add(time.Second)
	}
	is.access = is.mintLocked(exp)
	return is.access, is.live
}

// expiryOf reads the exp claim of an access token this issuer minted.
func expiryOf(access string) (time.Time, bool) {
	parts := strings.Split(access, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if json.Unmarshal(b, &claims) != nil || claims.Exp == 0 {
		return time.Time{}, false
	}
	return time.Unix(claims.Exp, 0), true
}

// MintExpiring replaces the accepted access token by one at the end of its life: issued one TTL
// before exp (for tests of a refresh ahead of time). It returns it.
func (is *Issuer) MintExpiring(exp time.Time) string {
	is.mu.Lock()
	defer is.mu.Unlock()
	is.access = is.mintIssuedLocked(exp.Add(-is.ttl), exp)
	return is.access
}

// WriteAuthFile writes codexHome/auth.json holding the current login, as `codex login` does.
func (is *Issuer) WriteAuthFile(codexHome string) error {
	is.mu.Lock()
	access, refresh := is.access, is.live
	is.mu.Unlock()
	return WriteAuthFile(codexHome, is.IDToken(), access, refresh, is.account)
}

// IDToken is an id token with the issuer's claims.
func (is *Issuer) IDToken() string {
	return JWT(map[string]any{"email": "user@example.com", "https://api.openai.com/auth": map[string]any{
		"chatgpt_account_id": is.account, "chatgpt_plan_type": is.plan, "chatgpt_user_id": "user-test"}})
}

// AuthJSON is the current login as an auth.json document: what a Molecule platform holds as
// CODEX_AUTH_JSON.
func (is *Issuer) AuthJSON() []byte {
	is.mu.Lock()
	access, refresh := is.access, is.live
	is.mu.Unlock()
	return AuthDoc(is.IDToken(), access, refresh, is.account)
}

// AuthDoc is a ChatGPT login in codex's auth.json format.
func AuthDoc(idToken, access, refresh, account string) []byte {
	doc := map[string]any{
		"auth_mode":      "chatgpt",
		"OPENAI_API_KEY": nil,
		"tokens": map[string]any{"id_token": idToken, "access_token": access, "refresh_token": refresh,
			"account_id": account},
		"last_refresh": time.Now().UTC().Format(time.RFC3339Nano),
	}
	data, _ := json.MarshalIndent(doc, "", "  ")
	return data
}

// WriteAuthFile writes codexHome/auth.json with a ChatGPT login, in codex's format.
func WriteAuthFile(codexHome, idToken, access, refresh, account string) error {
	data := AuthDoc(idToken, access, refresh, account)
	tmp := filepath.Join(codexHome, "auth.json.test-tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(codexHome, "auth.json"))
}

// JWT is an unsigned-but-well-formed JWT carrying claims (codex does not check signatures).
func JWT(claims map[string]any) string {
	enc := base64.RawURLEncoding
	head, _ := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT"})
	body, _ := json.Marshal(claims)
	return enc.EncodeToString(head) + "." + enc.EncodeToString(body) + "." + enc.EncodeToString([]byte("fake-signature"))
}

func (is *Issuer) mintLocked(exp time.Time) string {
	return is.mintIssuedLocked(time.Now(), exp)
}

func (is *Issuer) mintIssuedLocked(iat, exp time.Time) string {
	is.serial++
	return JWT(map[string]any{"exp": exp.Unix(), "iat": iat.Unix(), "jti": fmt.Sprintf("access-%d", is.serial),
		"https://api.openai.com/auth": map[string]any{"chatgpt_account_id": is.account, "chatgpt_plan_type": is.plan}})
}

// nextRefreshLocked is a new refresh token, as long as a real one is: a secret scan that skips
// short values must still see it.
func (is *Issuer) nextRefreshLocked() string {
	is.serial++
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/refresh/%d", is.account, is.serial))
	return fmt.Sprintf("rt-%d-%x", is.serial, sum[:12])
}

// ServeHTTP is the token endpoint.
func (is *Issuer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/oauth/token" {
		http.NotFound(w, r)
		return
	}
	var req struct {
		ClientID     string `json:"client_id"`
		GrantType    string `json:"grant_type"`
		RefreshToken string `json:"refresh_token"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.GrantType != "refresh_token" || req.ClientID == "" {
		writeErr(w, http.StatusBadRequest, "invalid_request")
		return
	}
	is.mu.Lock()
	is.calls++
	for _, ch := range is.waiters {
		close(ch)
	}
	is.waiters = nil
	fault := is.fault
	switch {
	case fault == FaultDown:
		is.mu.Unlock()
		writeErr(w, http.StatusServiceUnavailable, "temporarily_unavailable")
		return
	case fault == FaultHang:
		is.mu.Unlock()
		select {
		case <-is.release:
		case <-r.Context().Done():
		}
		writeErr(w, http.StatusServiceUnavailable, "temporarily_unavailable")
		return
	case fault == FaultInvalidGrant:
		is.mu.Unlock()
		writeErr(w, http.StatusBadRequest, "invalid_grant")
		return
	case is.spent[req.RefreshToken]:
		is.reused++
		is.mu.Unlock()
		writeErr(w, http.StatusUnauthorized, "refresh_token_reused")
		return
	case req.RefreshToken != is.live:
		is.mu.Unlock()
		writeErr(w, http.StatusUnauthorized, "refresh_token_invalidated")
		return
	}
	is.spent[is.live] = true
	is.live = is.nextRefreshLocked()
	is.access = is.mintLocked(time.Now().Add(is.ttl))
	res := map[string]string{"id_token": is.IDToken(), "access_token": is.access, "refresh_token": is.live}
	is.mu.Unlock()
	if fault == FaultLate {
		select {
		case <-is.release:
		case <-r.Context().Done():
			return
		}
	}
	if fault == FaultLoseAnswer {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(res)
}

func writeErr(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": "fake issuer: " + code}})
}
