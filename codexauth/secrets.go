package codexauth

// Secrets returns the credentials CODEX_HOME's auth.json holds (the ChatGPT access, refresh and
// id tokens, an API key), read now: whatever the daemon or codex last wrote. Nothing when the
// file is missing or unreadable. Callers refuse to let any of them leave the machine.
func Secrets(codexHome string) []string {
	af, err := readAuthFile(codexHome)
	if err != nil {
		return nil
	}
	var out []string
	for _, s := range []string{af.str(af.fields, "OPENAI_API_KEY"), af.str(af.tokens, "access_token"),
		af.str(af.tokens, "refresh_token"), af.str(af.tokens, "id_token")} {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}
