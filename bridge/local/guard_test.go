package local

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// Guard gives another listener the inbox's checks: a foreign Host is refused 421 before the
// token is looked at, a missing or wrong token 401 with WWW-Authenticate, a right one reaches the
// handler, and so does the configured listen host.
func TestGuardHandler(t *testing.T) {
	t.Parallel()
	var reached int
	h := Guard(GuardConfig{Token: "s3cret", AllowedHosts: []string{"10.0.0.5:9100"}, Realm: "codex-warm metrics"},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached++ }))
	for _, tc := range []struct {
		name, host, auth string
		status           int
		rule             string
	}{
		{"foreign host", "evil.example:9100", "Bearer s3cret", http.StatusMisdirectedRequest, RuleHost},
		{"no token", "127.0.0.1:9100", "", http.StatusUnauthorized, RuleToken},
		{"wrong token", "127.0.0.1:9100", "Bearer s3creT", http.StatusUnauthorized, RuleToken},
		{"right token", "127.0.0.1:9100", "Bearer s3cret", http.StatusOK, ""},
		{"listen host", "10.0.0.5:9100", "bearer s3cret", http.StatusOK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := reached
			req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			req.Host = tc.host
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body)
			}
			if tc.rule == "" {
				if reached != before+1 {
					t.Fatal("the handler was not reached")
				}
				return
			}
			var le ErrorReply
			if err := json.Unmarshal(rec.Body.Bytes(), &le); err != nil || le.Rule != tc.rule || reached != before {
				t.Fatalf("body %q (%v), reached %d→%d; want rule %s and no handler", rec.Body, err, before, reached, tc.rule)
			}
			if tc.status == http.StatusUnauthorized && rec.Header().Get("WWW-Authenticate") != `Bearer realm="codex-warm metrics"` {
				t.Errorf("WWW-Authenticate %q", rec.Header().Get("WWW-Authenticate"))
			}
		})
	}
}
