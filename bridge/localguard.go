package bridge

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"strings"
)

// Refusal rules named in LocalError.Rule.
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

func newGuard(cfg LocalInboxConfig) guard {
	g := guard{hosts: map[string]bool{}, origins: map[string]bool{}}
	if cfg.Token != "" {
		g.token = []byte(cfg.Token)
	}
	for _, h := range cfg.AllowedHosts {
		g.hosts[strings.ToLower(hostOnly(h))] = true
	}
	for _, o := range cfg.AllowedOrigins {
		g.origins[o] = true
	}
	return g
}

// check returns the refusal for r, or ok=false when r may go on.
func (g guard) check(r *http.Request) (status int, le LocalError, refused bool) {
	host := strings.ToLower(hostOnly(r.Host))
	if !IsLoopbackHost(host) && !g.hosts[host] {
		return http.StatusMisdirectedRequest, LocalError{Rule: RuleHost,
			Error: fmt.Sprintf("host %q is not served here: use a loopback address or the configured listen host", capText(r.Host, 100))}, true
	}
	if g.token != nil && !g.tokenOK(r.Header.Get("Authorization")) {
		return http.StatusUnauthorized, LocalError{Rule: RuleToken,
			Error: "missing or wrong bearer token: send Authorization: Bearer <inbox token>"}, true
	}
	if o, ok := r.Header["Origin"]; ok && (len(o) != 1 || !g.origins[o[0]]) {
		return http.StatusForbidden, LocalError{Rule: RuleOrigin,
			Error: fmt.Sprintf("origin %q is not allowed: requests from web pages are refused unless their origin is configured", capText(strings.Join(o, ","), 100))}, true
	}
	if r.Method == http.MethodPost {
		mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || mt != "application/json" {
			return http.StatusUnsupportedMediaType, LocalError{Rule: RuleContentType,
				Error: fmt.Sprintf("content type %q is not accepted: send Content-Type: application/json", capText(r.Header.Get("Content-Type"), 100))}, true
		}
	}
	return 0, LocalError{}, false
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
// machines could reach while no inbox token is set.
var ErrExposedWithoutToken = errors.New("the local inbox would be reachable from other machines without a token")

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
	return fmt.Errorf("listen address %q has %s: %w; listen on 127.0.0.1 (for example 127.0.0.1:%s), or set an inbox token",
		addr, what, ErrExposedWithoutToken, portOf(addr))
}

func portOf(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}
