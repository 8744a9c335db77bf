package codexauth

import (
	"bytes"
	"encoding/json"
)

// Secrets returns the credentials CODEX_HOME's auth.json holds (the ChatGPT access, refresh and
// id tokens, an API key), read now: whatever the daemon or codex last wrote. Nothing when the
// file is missing or unreadable. Callers refuse to let any of them leave the machine.
func Secrets(codexHome string) []string {
	af, err := readAuthFile(codexHome)
	if err != nil {
		return nil
	}
	return af.secrets()
}

// LoginSecrets returns the credentials an auth.json document holds (CODEX_AUTH_JSON as the
// platform gives it: the environment, the workspace's secrets), whatever kind of login it is.
// Nothing when it is not a JSON object.
func LoginSecrets(doc []byte) []string {
	af := &authFile{}
	if json.Unmarshal(doc, &af.fields) != nil || af.fields == nil {
		return nil
	}
	if raw, ok := af.fields["tokens"]; ok && !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		_ = json.Unmarshal(raw, &af.tokens)
	}
	return af.secrets()
}

func (af *authFile) secrets() []string {
	var out []string
	for _, s := range []string{af.str(af.fields, "OPENAI_API_KEY"), af.str(af.tokens, "access_token"),
		af.str(af.tokens, "refresh_token"), af.str(af.tokens, "id_token")} {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}
