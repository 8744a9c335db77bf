package moleculetest

import (
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Defaults of the rate limiter, as the real platform's router sets them (router.go: RATE_LIMIT,
// default 600 a minute).
const (
	DefaultRateLimit  = 600
	DefaultRateWindow = time.Minute
)

// TenantOrgHeaderRequired is the code of the tenant guard's 400 for a request without
// X-Molecule-Org-Id (middleware/tenant_guard.go).
const TenantOrgHeaderRequired = "TENANT_ORG_HEADER_REQUIRED"

// rateBucket is one fixed window of the limiter (middleware/ratelimit.go): it refills to the
// full rate once the window has passed since its last reset.
type rateBucket struct {
	tokens    int
	lastReset time.Time
}

// rateLimited applies the platform's rate limiter to r, as middleware/ratelimit.go does before
// any other check: the bucket is the X-Molecule-Org-Id header when present (the whole org shares
// it), else the bearer token's hash, else the client's IP. It sets X-RateLimit-* on w (every
// answer carries them) and reports the seconds to wait when the bucket is empty. Locked.
func (p *Platform) rateLimitedLocked(w http.ResponseWriter, r *http.Request) (retryAfter int, limited bool) {
	if p.cfg.RateLimit < 0 {
		return 0, false
	}
	key := rateKey(r)
	now := p.now()
	b := p.buckets[key]
	if b == nil {
		b = &rateBucket{tokens: p.cfg.RateLimit, lastReset: now}
		p.buckets[key] = b
	}
	if now.Sub(b.lastReset) >= p.cfg.RateWindow {
		b.tokens, b.lastReset = p.cfg.RateLimit, now
	}
	reset := max(int(b.lastReset.Add(p.cfg.RateWindow).Sub(now).Seconds()), 0)
	w.Header().Set("X-RateLimit-Limit", strconv.Itoa(p.cfg.RateLimit))
	w.Header().Set("X-RateLimit-Remaining", strconv.Itoa(max(b.tokens-1, 0)))
	w.Header().Set("X-RateLimit-Reset", strconv.Itoa(reset))
	if b.tokens <= 0 {
		w.Header().Set("Retry-After", strconv.Itoa(reset))
		return reset, true
	}
	b.tokens--
	return 0, false
}

func rateKey(r *http.Request) string {
	if org := strings.TrimSpace(r.Header.Get("X-Molecule-Org-Id")); org != "" {
		return "org:" + org
	}
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && strings.TrimSpace(tok) != "" {
		sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
		return "tok:" + hex.EncodeToString(sum[:])
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "ip:" + host
}

// tenantRefusal applies the tenant guard of a SaaS tenant (middleware/tenant_guard.go) when the
// platform has an org id: every route but register and heartbeat needs X-Molecule-Org-Id equal
// to it. Without the header the answer is 400 TENANT_ORG_HEADER_REQUIRED, with another id 404
// (no body). status 0: the request passes. Locked.
func (p *Platform) tenantRefusalLocked(route Route, r *http.Request) (status int, body any) {
	if p.orgID == "" || route == RouteRegister || route == RouteHeartbeat {
		return 0, nil
	}
	switch got := r.Header.Get("X-Molecule-Org-Id"); {
	case got == p.orgID:
		return 0, nil
	case got == "":
		return http.StatusBadRequest, map[string]string{
			"error":           "missing tenant routing header",
			"code":            TenantOrgHeaderRequired,
			"required_header": "X-Molecule-Org-Id",
			"detail":          "SaaS tenant API requests must include X-Molecule-Org-Id matching the organization UUID.",
		}
	default:
		return http.StatusNotFound, nil
	}
}

// SetRateLimit changes the rate limiter: limit requests per window and bucket (negative: off).
// A test whose timers run faster than production's scales the window with them, so the
// daemon meets the limit as often as it would in production: a 5 ms poll against a 60 ms window
// is a 5 s poll against the real minute. Buckets start over.
func (p *Platform) SetRateLimit(limit int, window time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cfg.RateLimit, p.cfg.RateWindow = limit, window
	p.buckets = make(map[string]*rateBucket)
}

// now is the limiter's clock: Config.Clock, else the time (a synctest bubble's inside one).
func (p *Platform) now() time.Time {
	if p.cfg.Clock != nil {
		return p.cfg.Clock()
	}
	return time.Now()
}

// SetOrgID turns the tenant guard on for org (a SaaS tenant whose control plane set
// MOLECULE_ORG_ID), or off with "".
func (p *Platform) SetOrgID(org string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.orgID = org
}

// RotateToken makes token the workspace's only live token, as a platform restart that rotates
// it does: the old one is answered 401 from now on. The test writes the new token where the
// daemon finds it (<configs>/.auth_token).
func (p *Platform) RotateToken(token string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.token, p.live = token, true
}

// authorizedLocked checks the bearer as the platform does: with a live token it must match; a
// workspace without one yet (NoLiveToken) lets register and heartbeat through
// (registry.go requireWorkspaceToken: a first registration needs no credential) and refuses
// everything else.
func (p *Platform) authorizedLocked(route Route, r *http.Request) bool {
	if route == RouteEvents && p.events.off {
		// A platform without the route has no WorkspaceAuth in front of it: its router answers
		// 404 whatever the token.
		return true
	}
	tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if p.ws.current() == StatusRemoved {
		// The deletion revoked every token (workspace.go): no live token, so register and
		// heartbeat pass on the bootstrap allowance until register issued one, which only the
		// registry accepts; an org-scoped token still reads /state.
		switch route {
		case RouteRegister, RouteHeartbeat:
			return p.ws.issued == "" || tok == p.ws.issued
		case RouteState:
			return p.cfg.OrgScopedToken && tok == p.token
		}
		return false
	}
	if !p.live {
		return route == RouteRegister || route == RouteHeartbeat
	}
	return tok == p.token
}

// issueTokenLocked is register's token issuance (registry.go Register): a workspace without a
// live token gets one in the answer, once.
func (p *Platform) issueTokenLocked() (token string, issued bool) {
	if p.ws.current() == StatusRemoved {
		if p.ws.issued != "" {
			return "", false
		}
		p.ws.issued = "issued-" + newUUID()
		return p.ws.issued, true
	}
	if p.live {
		return "", false
	}
	p.live = true
	return p.token, true
}
