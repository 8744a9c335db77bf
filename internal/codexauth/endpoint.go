package codexauth

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// The token endpoint as codex 0.169 calls it (login/src/auth/manager.rs).
const (
	// DefaultTokenURL is codex's OAuth token endpoint.
	DefaultTokenURL = "https://auth.openai.com/oauth/token"
	// TokenURLEnv moves the endpoint, for codex and for the daemon alike.
	TokenURLEnv = "CODEX_REFRESH_TOKEN_URL_OVERRIDE"
	// ClientID is codex's OAuth client id.
	ClientID = "app_EMoamEEZ73f0CkXaXp7hrann"
)

// Error codes of a refresh the endpoint refused for good (codex's classify_refresh_token_failure).
const (
	CodeExpired     = "refresh_token_expired"
	CodeReused      = "refresh_token_reused"
	CodeInvalidated = "refresh_token_invalidated"
)

// maxTokenBody bounds what is read of the endpoint's answer: three JWTs fit many times over.
const maxTokenBody = 1 << 20

// RejectedError is a refresh the endpoint refused for good: a 401, or one of the Code*
// errors. The refresh token is spent or revoked; only a new login helps.
type RejectedError struct {
	Status int
	// Code is the endpoint's error code ("refresh_token_reused", "invalid_grant", ...) or "".
	Code string
}

func (e *RejectedError) Error() string {
	code := e.Code
	if code == "" {
		code = "no error code"
	}
	return fmt.Sprintf("the token endpoint rejected the refresh token (HTTP %d, %s)", e.Status, code)
}

// refreshRequest is the JSON body codex posts.
type refreshRequest struct {
	ClientID     string `json:"client_id"`
	GrantType    string `json:"grant_type"`
	RefreshToken string `json:"refresh_token"`
}

// refreshResponse is the endpoint's answer; each token may be absent, which keeps the old one.
type refreshResponse struct {
	IDToken      string `json:"id_token"`
	AccessToken  string `json:"access_token"`
	RefreshToken string `json:"refresh_token"`
}

// postRefresh spends refreshToken at url. A *RejectedError means the endpoint refused it for
// good; any other error leaves it unknown whether the token was spent.
func postRefresh(ctx context.Context, hc *http.Client, url, refreshToken string) (refreshResponse, error) {
	var res refreshResponse
	body, _ := json.Marshal(refreshRequest{ClientID: ClientID, GrantType: "refresh_token", RefreshToken: refreshToken})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return res, fmt.Errorf("token endpoint %s: %w", url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return res, &transportError{fmt.Errorf("token endpoint: %w", err)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxTokenBody+1))
	if err != nil {
		return res, &transportError{fmt.Errorf("token endpoint %s: reading the answer: %w", url, err)}
	}
	if len(data) > maxTokenBody {
		return res, fmt.Errorf("token endpoint %s: answer over %d bytes", url, maxTokenBody)
	}
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		// Never followed: the refresh token must not travel anywhere but the endpoint.
		return res, fmt.Errorf("token endpoint %s: HTTP %d redirect to %q refused", url, resp.StatusCode, resp.Header.Get("Location"))
	case resp.StatusCode != http.StatusOK:
		code := errorCode(data)
		switch strings.ToLower(code) {
		case CodeExpired, CodeReused, CodeInvalidated:
			return res, &RejectedError{Status: resp.StatusCode, Code: code}
		}
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusBadRequest && code == "invalid_grant" {
			return res, &RejectedError{Status: resp.StatusCode, Code: code}
		}
		return res, fmt.Errorf("token endpoint %s: HTTP %d %s", url, resp.StatusCode, code)
	}
	if err := json.Unmarshal(data, &res); err != nil {
		return res, fmt.Errorf("token endpoint %s: undecodable answer: %w", url, err)
	}
	if res.AccessToken == "" {
		return res, fmt.Errorf("token endpoint %s: answer has no access_token", url)
	}
	return res, nil
}

// errorCode reads the error code of a refused refresh the way codex does: error.code, a string
// error, or a top-level code.
func errorCode(body []byte) string {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return ""
	}
	var s string
	if raw, ok := m["error"]; ok {
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
		var obj struct {
			Code string `json:"code"`
		}
		if json.Unmarshal(raw, &obj) == nil && obj.Code != "" {
			return obj.Code
		}
	}
	if json.Unmarshal(m["code"], &s) == nil {
		return s
	}
	return ""
}

// NoRedirectClient is an HTTP client that never follows a redirect.
func NoRedirectClient() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}
