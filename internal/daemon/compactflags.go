package daemon

import "fmt"

// compactFlags are the long-thread policy's flags (supervisor/compact.go): compact a chat's
// thread with codex's own call after so many turns, or once its child's private memory passed a
// size. Both are off by default: a compaction replaces the history the model sees with a
// summary the model writes (docs/PROTOCOL.md, "Compacting a thread").
type compactFlags struct {
	afterTurns int
	above      string
}

func (f *compactFlags) register(e *envFlags) {
	e.int(&f.afterTurns, "compact-after-turns", "CODEX_WARM_COMPACT_AFTER_TURNS", 0,
		"compact a chat's codex thread (codex's thread/compact/start: the model summarizes the conversation) before the turn that follows this many turns of one child on it; 0: never")
	e.str(&f.above, "compact-above", "CODEX_WARM_COMPACT_ABOVE", "off",
		"compact a chat's codex thread before the next turn once its child's private memory (USS) passed this size (once per child); off disables")
}

// apply checks the flags and sets them on c.
func (f compactFlags) apply(c *Config) error {
	if f.afterTurns < 0 {
		return fmt.Errorf("--compact-after-turns %d: must be >= 0", f.afterTurns)
	}
	above, err := parseMemoryLimit(f.above)
	if err != nil {
		return fmt.Errorf("--compact-above %q: %w", f.above, err)
	}
	c.CompactAfterTurns, c.CompactAboveBytes = f.afterTurns, above
	return nil
}
