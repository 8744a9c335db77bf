package moleculetest

import "net/http"

// RouteSecrets is GET /workspaces/{ws}/secrets/values.
const RouteSecrets Route = "secrets"

// SetSecret sets (value "" deletes) one of the workspace's secrets, as an admin or the
// platform's own refresher does: CODEX_AUTH_JSON is the workspace's ChatGPT login, which only
// the platform rotates. A test rotates it by spending the login at its fake token endpoint and
// setting the blob it got here.
func (p *Platform) SetSecret(key, value string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.secrets == nil {
		p.secrets = map[string]string{}
	}
	if value == "" {
		delete(p.secrets, key)
	} else {
		p.secrets[key] = value
	}
	p.changedLocked()
}

// secretValues answers GET /workspaces/{ws}/secrets/values as the platform does
// (handlers/secrets.go Values): the workspace's secrets as a flat {"KEY": "value"} map.
func (p *Platform) secretValues(r *http.Request, _ []byte) (int, any) {
	if !p.ownWorkspace(r) {
		return http.StatusUnauthorized, map[string]string{"error": "invalid workspace auth token"}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]string, len(p.secrets))
	for k, v := range p.secrets {
		out[k] = v
	}
	return http.StatusOK, out
}
