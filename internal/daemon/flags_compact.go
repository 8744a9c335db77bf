package daemon

import "fmt"

// compactFlags are the long-thread policy's flags (supervisor/compact.go): compact a chat's
// thread with codex's own call after so many turns, or once its child's private memory passed a
// size. Both are off by default: a compaction replaces the history the model sees with a
// summary the model writes (docs/PROTOCOL.md, "Compacting a thread").
func compactFlags(e *envFlags, c *Config) func() error {
	var afterTurns int
	var above string
	e.int(&afterTurns, "compact-after-turns", "CODEX_WARM_COMPACT_AFTER_TURNS", 0,
		"compact a chat's codex thread (codex's thread/compact/start: the model summarizes the conversation) before the turn that follows this many turns of one child on it; 0: never")
	e.str(&above, "compact-above", "CODEX_WARM_COMPACT_ABOVE", "off",
		"compact a chat's codex thread before the next turn once its child's private memory (USS) passed this size (once per child); off disables")
	return func() error {
		if afterTurns < 0 {
			return fmt.Errorf("--compact-after-turns %d: must be >= 0", afterTurns)
		}
		bytes, err := parseMemoryLimit(above)
		if err != nil {
			return fmt.Errorf("--compact-above %q: %w", above, err)
		}
		c.CompactAfterTurns, c.CompactAboveBytes = afterTurns, bytes
		return nil
	}
}
