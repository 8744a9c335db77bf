package local

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"strings"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/bridge/chat"
)

// Refusal rules named in ErrorReply.Rule.
const (
	RuleHost        = "host"
	RuleToken       = "token"
	RuleOrigin      = "origin"
	RuleContentType = "content-type"
	RuleBody        = "body"
	RuleBodyTimeout = "body-timeout"
)

// guard holds the checks every local inbox request passes before it reaches a handler. They
// close what a web page in the operator's browser could otherwise do with a loopback port:
//   - a CORS "simple request" (text/plain or form content type, no preflight) makes the browser
//     send a POST cross-origin; only application/json is accepted, and such a request carries
//     an Origin header, which is refused unless configured;
//   - DNS rebinding lets a page read the answers under its own host name, which the Host check
//     refuses.
//
// The token, when set, is what protects a listener that other machines can reach.
type guard struct {
	token   []byte
	hosts   map[string]bool
	origins map[string]bool
}

func newGuard(token string, hosts, origins []string) guard {
	g := guard{hosts: map[string]bool{}, origins: map[string]bool{}}
	if token != "" {
		g.token = []byte(token)
	}
	for _, h := range hosts {
		g.hosts[strings.ToLower(hostOnly(h))] = true
	}
	for _, o := range origins {
		g.origins[o] = true
	}
	return g
}

// GuardConfig configures Guard.
type GuardConfig struct {
	// Token, when set, must come as "Authorization: Bearer <token>" on every request (401
	// otherwise); see CheckListenAddress.
	Token string
	// AllowedHosts are Host header names accepted besides loopback names and addresses (421
	// otherwise): the configured listen host.
	AllowedHosts []string
	// Realm names the listener in the WWW-Authenticate header of a 401.
	Realm string
	// Logger gets a warn line per refused request; nil means no logging.
	Logger *zap.Logger
}

// Guard returns next behind the local inbox's request checks: Host (421), bearer token compared
// in constant time (401), Origin (403: no origin is allowed) and, for POST, content type (415).
// Refusals are JSON ErrorReply answers, as the inbox's. Other loopback listeners of the daemon
// (metrics) use it so that a web page or DNS rebinding cannot read them either.
func Guard(cfg GuardConfig, next http.Handler) http.Handler {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return guarded{g: newGuard(cfg.Token, cfg.AllowedHosts, nil), realm: cfg.Realm, log: cfg.Logger, next: next}
}

// guarded serves next for the requests g lets through.
type guarded struct {
	g     guard
	realm string
	log   *zap.Logger
	next  http.Handler
}

func (h guarded) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if status, le, refused := h.g.check(r); refused {
		h.log.Warn("request refused", zap.String("rule", le.Rule), zap.String("host", chat.CapText(r.Host, 100)),
			zap.String("origin", chat.CapText(r.Header.Get("Origin"), 100)), zap.String("remote", r.RemoteAddr), zap.String("path", chat.CapText(r.URL.Path, 200)))
		if status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf("Bearer realm=%q", h.realm))
		}
		writeJSON(w, status, le)
		return
	}
	h.next.ServeHTTP(w, r)
}

// check returns the refusal for r, or ok=false when r may go on.
func (g guard) check(r *http.Request) (status int, le ErrorReply, refused bool) {
	host := strings.ToLower(hostOnly(r.Host))
	if !IsLoopbackHost(host) && !g.hosts[host] {
		return http.StatusMisdirectedRequest, ErrorReply{Rule: RuleHost,
			Error: fmt.Sprintf("host %q is not served here: use a loopback address or the configured listen host", chat.CapText(r.Host, 100))}, true
	}
	if g.token != nil && !g.tokenOK(r.Header.Get("Authorization")) {
		return http.StatusUnauthorized, ErrorReply{Rule: RuleToken,
			Error: "missing or wrong bearer token: send Authorization: Bearer <token>"}, true
	}
	if o, ok := r.Header["Origin"]; ok && (len(o) != 1 || !g.origins[o[0]]) {
		return http.StatusForbidden, ErrorReply{Rule: RuleOrigin,
			Error: fmt.Sprintf("origin %q is not allowed: requests from web pages are refused unless their origin is configured", chat.CapText(strings.Join(o, ","), 100))}, true
	}
	if r.Method == http.MethodPost {
		mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || mt != "application/json" {
			return http.StatusUnsupportedMediaType, ErrorReply{Rule: RuleContentType,
				Error: fmt.Sprintf("content type %q is not accepted: send Content-Type: application/json", chat.CapText(r.Header.Get("Content-Type"), 100))}, true
		}
	}
	return 0, ErrorReply{}, false
}

// tokenOK compares in constant time, so the answer's timing tells nothing about the token.
func (g guard) tokenOK(header string) bool {
	scheme, tok, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), g.token) == 1
}

// hostOnly strips the port from a Host header or listen address, and the brackets of an IPv6
// literal.
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
}

// IsLoopbackHost reports whether host (no port) names this machine's loopback interface:
// "localhost" or a loopback address. Other names are not resolved: what a name resolves to is
// what DNS rebinding controls.
func IsLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ErrExposedWithoutToken is returned by CheckListenAddress for a listen address that other
// machines could reach while no token is set.
var ErrExposedWithoutToken = errors.New("the listener would be reachable from other machines without a token")

// CheckListenAddress refuses a listen address beyond loopback when no token protects it. An
// empty host (":8377", ":0") means every interface and counts as beyond loopback.
func CheckListenAddress(addr string, tokenSet bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if tokenSet || IsLoopbackHost(host) {
		return nil
	}
	what := fmt.Sprintf("host %q", host)
	if host == "" {
		what = "an empty host (every interface)"
	}
	return fmt.Errorf("listen address %q has %s: %w; listen on 127.0.0.1 (for example 127.0.0.1:%s), or set a token",
		addr, what, ErrExposedWithoutToken, portOf(addr))
}

func portOf(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}
