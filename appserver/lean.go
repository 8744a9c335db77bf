package appserver

// Setting is one codex config setting, passed to a child as "-c Key=Value".
type Setting struct{ Key, Value string }

// Override is the setting as a ConfigOverrides entry.
func (s Setting) Override() string { return s.Key + "=" + s.Value }

// LeanSettings are the codex settings that make every turn cheaper and change nothing the model
// receives (the requests were compared byte for byte, docs/PROTOCOL.md section 9): the
// skill-search shadow ranking only records metrics, and feedback is a client-side upload path a
// daemon never uses. The daemon gives them to its children unless the operator set the key; a
// bare client measured against the daemon gives them too, so that both run the same codex.
func LeanSettings() []Setting {
	return []Setting{
		{"features.skill_search", "false"},
		{"feedback.enabled", "false"},
	}
}
