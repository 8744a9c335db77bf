package daemon

// basicFlags are the daemon's own settings: the codex binary and its configuration, where the
// daemon keeps its state, where codex works and as whom, and the log.
func basicFlags(e *envFlags, c *Config) func() error {
	e.str(&c.CodexBin, "codex-bin", "CODEX_BIN", "", "native codex binary (the npm wrapper is resolved to it); default: the codex beside supervisor, else the one in PATH")
	e.str(&c.StateDir, "state-dir", "CODEX_CHANNEL_MOLECULE_STATE_DIR", DefaultStateDir(e.getenv), "state directory (sessions.json, inbox position, control socket)")
	e.str(&c.ChildUser, "child-user", "CODEX_WARM_CHILD_USER", "", "run codex children as this user (name or uid; the daemon must run as root): the commands codex runs then cannot read the daemon's state or process")
	e.str(&c.Cwd, "cwd", "CODEX_WARM_CWD", "", "working directory of codex threads; default: the daemon's")
	e.str(&c.LogLevel, "log-level", "CODEX_WARM_LOG_LEVEL", "info", "debug, info, warn or error")
	e.str(&c.LogFormat, "log-format", "CODEX_WARM_LOG_FORMAT", "json", "json or console")
	var overrides listFlag
	e.fs.Var(&overrides, "codex-config", "extra codex -c key=value override (repeatable)")
	return func() error {
		c.CodexBinFrom = CodexBinSource(e.fs, c.CodexBin)
		c.CodexConfig = overrides
		return nil
	}
}
