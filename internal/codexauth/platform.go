package codexauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// Owners of a ChatGPT login, as doctor, status and metrics name them.
const (
	// OwnerDaemon: the login is the daemon's own (CODEX_HOME/auth.json of an operator's `codex
	// login`); the daemon refreshes it once for every child and writes it back.
	OwnerDaemon = "daemon"
	// OwnerPlatform: the platform rotates the login (a Molecule workspace's CODEX_AUTH_JSON);
	// the daemon only reads it, hands it to its children, and never calls the token endpoint.
	OwnerPlatform = "platform"
	// OwnerChild: each codex child holds its own login (--chatgpt-tokens off, or a login that
	// is not a ChatGPT one).
	OwnerChild = "child"
)

// Outcome of a child's refresh request that found the platform still holding the refused token.
const OutcomeNotRenewed = "not_renewed"

// DefaultPlatformCheck is how often a login the platform owns is read again. The platform
// renews it when it has less than 15 minutes left, checking every 5 minutes; a read a minute
// picks the new one up long before the old one expires.
const DefaultPlatformCheck = time.Minute

// ErrNoLogin is what a Source returns when it holds no login (the variable is unset, the
// platform's secrets have no CODEX_AUTH_JSON, the file does not exist).
var ErrNoLogin = errors.New("no ChatGPT login here")

// ErrNotRenewed means the model refused the access token of a login the platform owns and the
// platform holds no newer one yet. The daemon never refreshes such a login (that would spend the
// org's single-use refresh token); the platform renews it on its own schedule.
var ErrNotRenewed = errors.New("the platform has not renewed the workspace's ChatGPT login yet (the daemon never refreshes a login the platform owns)")

// Source is one place a login the platform owns is read from: the platform's secrets, the
// environment the workspace was started with, the auth.json the platform syncs. The platform
// side (how to reach it, with which token) stays with the caller.
type Source struct {
	// Name says where the login came from in logs and status ("platform secrets", ...).
	Name string
	// Read returns the current auth.json document, or an error wrapping ErrNoLogin when the
	// source holds none. It must honour ctx.
	Read func(ctx context.Context) ([]byte, error)
}

// sourced is one source's login as read.
type sourced struct {
	name string
	tok  Tokens
}

// ParseLogin reads an auth.json document (CODEX_AUTH_JSON) as codex would: a ChatGPT login's
// tokens with the access token's claims. Another kind of login is an error.
func ParseLogin(doc []byte) (Tokens, error) {
	af := &authFile{}
	if err := json.Unmarshal(doc, &af.fields); err != nil || af.fields == nil {
		return Tokens{}, errors.New("not a JSON object")
	}
	if raw, ok := af.fields["tokens"]; ok {
		if err := json.Unmarshal(raw, &af.tokens); err != nil {
			return Tokens{}, errors.New("tokens is not an object")
		}
	}
	if k := af.kind(); k != KindChatGPT {
		return Tokens{}, fmt.Errorf("not a ChatGPT login (%s)", k)
	}
	return af.loginTokens()
}

// Newer reports whether a is a later login than b, by what the access tokens carry: the later
// expiry, then the later issue time. Equal tokens, or tokens that tell nothing, are not newer:
// what is held stays.
func Newer(a, b Tokens) bool {
	if a.AccessToken == b.AccessToken {
		return false
	}
	if !a.Expires.Equal(b.Expires) {
		return a.Expires.After(b.Expires)
	}
	return a.Issued.After(b.Issued)
}

// readSources reads every source within ctx and returns the newest login among them, and the
// errors of those that failed (ErrNoLogin is not a failure).
func readSources(ctx context.Context, sources []Source) (best sourced, found bool, errs error) {
	for _, s := range sources {
		doc, err := s.Read(ctx)
		if errors.Is(err, ErrNoLogin) {
			continue
		}
		if err != nil {
			errs = errors.Join(errs, fmt.Errorf("%s: %w", s.Name, err))
			continue
		}
		t, err := ParseLogin(doc)
		if err != nil {
			errs = errors.Join(errs, fmt.Errorf("%s: CODEX_AUTH_JSON: %w", s.Name, err))
			continue
		}
		if !found || Newer(t, best.tok) {
			best, found = sourced{name: s.Name, tok: t}, true
		}
	}
	return best, found, errs
}

// openPlatform is Open for a login the platform owns: the newest login the sources hold.
func openPlatform(cfg Config) (*Manager, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.RequestTimeout)
	defer cancel()
	best, found, errs := readSources(ctx, cfg.Platform)
	if !found {
		if errs == nil {
			errs = ErrNoLogin
		}
		return nil, fmt.Errorf("the platform's ChatGPT login: no source holds one: %w", errs)
	}
	m := &Manager{cfg: cfg, log: cfg.Logger.Named("codexauth"), tok: best.tok, state: StateValid,
		source: best.name, subs: map[int]func(){}}
	m.life, m.stop = context.WithCancel(context.Background())
	if errs != nil {
		m.log.Warn("some sources of the platform's ChatGPT login could not be read", zap.Error(errs))
	}
	return m, nil
}

// platformOwned reports whether the platform owns the login: the daemon only reads it.
func (m *Manager) platformOwned() bool { return len(m.cfg.Platform) > 0 }

// readPlatform is a refresh of a login the platform owns: the sources are read again and the
// newest login adopted. It never calls the token endpoint. When stale is still the newest
// token, the answer is ErrNotRenewed.
func (m *Manager) readPlatform(ctx context.Context, stale string) (Tokens, error) {
	m.adoptPlatform(ctx, stale)
	m.mu.Lock()
	cur := m.tok
	m.mu.Unlock()
	if stale == "" || cur.AccessToken != stale {
		return cur, nil
	}
	m.mu.Lock()
	m.lastOutcome, m.lastErr = OutcomeNotRenewed, ErrNotRenewed.Error()
	m.mu.Unlock()
	m.counted(OutcomeNotRenewed)
	m.log.Warn("the model refused the platform's ChatGPT access token and the platform holds no newer one yet; "+
		"the daemon does not refresh a login the platform owns (the platform renews it within 15 minutes of expiry)",
		zap.Time("expires", cur.Expires), zap.String("source", m.sourceName()))
	return cur, ErrNotRenewed
}

// adoptPlatform reads the sources and adopts a newer login than the one held, or, when the
// held access token is stale (the model refused it), any other login that is not older. It
// reports whether it did.
func (m *Manager) adoptPlatform(ctx context.Context, stale string) bool {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.RequestTimeout)
	defer cancel()
	best, found, errs := readSources(ctx, m.cfg.Platform)
	if errs != nil {
		m.log.Warn("could not read the platform's ChatGPT login from every source", zap.Error(errs))
	}
	m.mu.Lock()
	replaces := Newer(best.tok, m.tok) ||
		stale != "" && m.tok.AccessToken == stale && best.tok.AccessToken != stale && !Newer(m.tok, best.tok)
	if !found || !replaces {
		m.mu.Unlock()
		return false
	}
	m.tok, m.source, m.state, m.lastRefresh, m.lastOutcome, m.lastErr = best.tok, best.name, StateValid, time.Now(), OutcomeAdopted, ""
	m.mu.Unlock()
	m.counted(OutcomeAdopted)
	m.log.Info("adopted the platform's renewed ChatGPT login", zap.String("source", best.name), zap.Time("expires", best.tok.Expires))
	m.publish()
	return true
}

func (m *Manager) sourceName() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.source
}

// runPlatform is Run for a login the platform owns: it reads the sources every PlatformCheck
// and pushes a newer login to the children.
func (m *Manager) runPlatform(ctx context.Context) {
	t := time.NewTicker(m.cfg.PlatformCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m.adoptPlatform(ctx, "")
	}
}
