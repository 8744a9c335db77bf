package platform

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/molecule-ai/codex-warm/internal/secretset"
)

// maxSecretsBody caps GET /workspaces/{ws}/secrets/values: the answer is every secret of the
// workspace (globals merged with its own), a few kilobytes; a larger one is refused whole.
const maxSecretsBody = 1 << 20

// ErrNoSecret means the platform answered and the workspace has no such secret.
var ErrNoSecret = errors.New("the workspace has no such secret on the platform")

// NewSecretsReader is a SecretsReader for the workspace of o, on hc.
func NewSecretsReader(o Options, hc *http.Client) (*SecretsReader, error) {
	c, err := New(o, hc)
	if err != nil {
		return nil, err
	}
	return &SecretsReader{c: c, set: o.Secrets}, nil
}

// SecretsReader reads one secret of the workspace from the platform, as the codex template's
// auth sync does: GET /workspaces/{ws}/secrets/values with the workspace token (and
// X-Molecule-Org-Id when known), never following a redirect, the body capped. Every value of the
// answer goes into the secret set (Options.Secrets), the workspace's secrets being all secret and
// a model able to fetch them with the workspace token; only the asked-for value is returned.
type SecretsReader struct {
	c   *Client
	set *secretset.Set
}

// Secret returns the value of the workspace's secret key; ErrNoSecret when the platform has
// none; an *HTTPError for a non-2xx answer. Errors never quote a secret.
func (r *SecretsReader) Secret(ctx context.Context, key string) (string, error) {
	const op = "read secrets"
	ctx, cancel := context.WithTimeout(ctx, r.c.timeout)
	defer cancel()
	resp, err := r.c.start(ctx, request{op: op, method: http.MethodGet,
		path: "/workspaces/" + r.c.ws + "/secrets/values"})
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		body, err := r.c.readSmall(op, resp)
		if err != nil {
			return "", err
		}
		he := r.c.statusErr(op, resp, body).(*HTTPError)
		he.Body = "" // an error body may quote what it refused to give
		return "", he
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxSecretsBody+1))
	if err != nil {
		return "", fmt.Errorf("%s: read the answer: %w", op, err)
	}
	if len(data) > maxSecretsBody {
		return "", fmt.Errorf("%s: answer over %d bytes refused", op, maxSecretsBody)
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(data, &all); err != nil || all == nil {
		return "", fmt.Errorf("%s: the answer is not a JSON object of secrets", op)
	}
	r.learn(all)
	raw, ok := all[key]
	clear(all)
	if !ok {
		return "", fmt.Errorf("%s: %s: %w", op, key, ErrNoSecret)
	}
	var v string
	if err := json.Unmarshal(raw, &v); err != nil {
		// The template accepts an object too, re-encoded.
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			return "", fmt.Errorf("%s: %s is neither a string nor an object", op, key)
		}
		v = string(raw)
	}
	if v == "" {
		return "", fmt.Errorf("%s: %s is empty: %w", op, key, ErrNoSecret)
	}
	return v, nil
}

// learn adds every value of a secrets answer to the set, as one generation: a string as it is,
// and a JSON document (an object such as CODEX_AUTH_JSON, given as one or as a string holding
// one) as its text and every string inside it, so a file holding one token of it is refused.
func (r *SecretsReader) learn(all map[string]json.RawMessage) {
	var values []string
	for _, raw := range all {
		values = appendStrings(values, raw, 0)
	}
	r.set.Add(secretset.WorkspaceSecrets, values...)
}

// maxSecretDepth bounds how deep learn looks into a secret's JSON.
const maxSecretDepth = 4

// appendStrings appends the strings a JSON value holds: the value itself when it is a string,
// else its text and the strings within it, to maxSecretDepth.
func appendStrings(out []string, raw json.RawMessage, depth int) []string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		out = append(out, s)
		if t := strings.TrimSpace(s); depth < maxSecretDepth && (strings.HasPrefix(t, "{") || strings.HasPrefix(t, "[")) {
			out = appendStrings(out, json.RawMessage(t), depth+1)
		}
		return out
	}
	if depth == 0 {
		out = append(out, string(bytes.TrimSpace(raw)))
	}
	if depth >= maxSecretDepth {
		return out
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) == nil {
		for _, v := range obj {
			out = appendStrings(out, v, depth+1)
		}
		return out
	}
	var arr []json.RawMessage
	if json.Unmarshal(raw, &arr) == nil {
		for _, v := range arr {
			out = appendStrings(out, v, depth+1)
		}
	}
	return out
}
