package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// runConfig is everything `supervisor run` is configured with. Every flag has an environment
// fallback so the daemon drops into the Python daemon's deployment unchanged.
type runConfig struct {
	CodexBin         string
	CodexConfig      []string
	StateDir         string
	Inbox            string
	Listen           string
	Cwd              string
	MaxChildren      int
	MaxQueue         int
	IdleTTL          time.Duration
	TurnTimeout      time.Duration
	PostToolTimeout  time.Duration
	HandshakeTimeout time.Duration
	DrainTimeout     time.Duration
	PollInterval     time.Duration
	PlatformTimeout  time.Duration
	Approval         string
	LogLevel         string
	LogFormat        string
}

// defaultStateDir is the Python daemon's state directory, so its sessions.json is picked up.
func defaultStateDir(getenv func(string) string) string {
	if d := getenv("CODEX_CHANNEL_MOLECULE_STATE_DIR"); d != "" {
		return d
	}
	home := getenv("HOME")
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	return filepath.Join(home, ".codex-channel-molecule")
}

// envFlags binds flags whose defaults come from the environment and remembers parse errors of
// those defaults, so a typo in the environment fails loudly instead of being ignored.
type envFlags struct {
	fs     *flag.FlagSet
	getenv func(string) string
	errs   []error
}

func (e *envFlags) str(p *string, name, env, def, usage string) {
	if v := e.getenv(env); v != "" {
		def = v
	}
	e.fs.StringVar(p, name, def, usage+" (env "+env+")")
}

func (e *envFlags) int(p *int, name, env string, def int, usage string) {
	if v := e.getenv(env); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			e.errs = append(e.errs, fmt.Errorf("env %s=%q: %w", env, v, err))
		} else {
			def = n
		}
	}
	e.fs.IntVar(p, name, def, usage+" (env "+env+")")
}

func (e *envFlags) dur(p *time.Duration, name, env string, def time.Duration, usage string) {
	if v := e.getenv(env); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			e.errs = append(e.errs, fmt.Errorf("env %s=%q: %w", env, v, err))
		} else {
			def = d
		}
	}
	e.fs.DurationVar(p, name, def, usage+" (env "+env+")")
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func parseRunConfig(args []string, getenv func(string) string, stderr io.Writer) (runConfig, error) {
	var c runConfig
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	e := &envFlags{fs: fs, getenv: getenv}
	e.str(&c.CodexBin, "codex-bin", "CODEX_BIN", "", "native codex binary; default: found from PATH and the npm layout")
	e.str(&c.StateDir, "state-dir", "CODEX_CHANNEL_MOLECULE_STATE_DIR", defaultStateDir(getenv), "state directory (sessions.json, inbox position, control socket)")
	e.str(&c.Inbox, "inbox", "CODEX_WARM_INBOX", "", "molecule or local; default: molecule when PLATFORM_URL is set, else local")
	e.str(&c.Listen, "listen", "CODEX_WARM_LISTEN", "127.0.0.1:8377", "address of the local inbox HTTP API")
	e.str(&c.Cwd, "cwd", "CODEX_WARM_CWD", "", "working directory of codex threads; default: the daemon's")
	e.int(&c.MaxChildren, "max-children", "CODEX_WARM_MAX_CHILDREN", 0, "maximum live codex children; 0 sizes it from available memory")
	e.int(&c.MaxQueue, "max-queue", "CODEX_WARM_MAX_QUEUE", 16, "messages waiting per chat before it answers busy")
	e.dur(&c.IdleTTL, "idle-ttl", "CODEX_WARM_IDLE_TTL", 15*time.Minute, "close a child idle for this long")
	e.dur(&c.TurnTimeout, "turn-timeout", "CODEX_WARM_TURN_TIMEOUT", 600*time.Second, "interrupt a turn running this long")
	e.dur(&c.PostToolTimeout, "post-tool-timeout", "CODEX_WARM_POST_TOOL_TIMEOUT", 90*time.Second, "retire a child silent this long after a tool finished")
	e.dur(&c.HandshakeTimeout, "handshake-timeout", "CODEX_WARM_HANDSHAKE_TIMEOUT", 30*time.Second, "retire a child that does not finish initialize in time")
	e.dur(&c.DrainTimeout, "drain-timeout", "CODEX_WARM_DRAIN_TIMEOUT", 30*time.Second, "on SIGTERM, let running turns finish this long before interrupting them")
	e.dur(&c.PollInterval, "poll-interval", "CODEX_WARM_POLL_INTERVAL", time.Second, "Molecule activity poll interval")
	e.dur(&c.PlatformTimeout, "platform-timeout", "CODEX_WARM_PLATFORM_TIMEOUT", 30*time.Second, "bound on one Molecule platform call (poll, reply, heartbeat)")
	e.str(&c.Approval, "approval", "CODEX_WARM_APPROVAL", "decline", "answer to codex command and file-change approval requests: decline or accept")
	e.str(&c.LogLevel, "log-level", "CODEX_WARM_LOG_LEVEL", "info", "debug, info, warn or error")
	e.str(&c.LogFormat, "log-format", "CODEX_WARM_LOG_FORMAT", "json", "json or console")
	var overrides listFlag
	fs.Var(&overrides, "codex-config", "extra codex -c key=value override (repeatable)")
	if err := fs.Parse(args); err != nil {
		return c, exitCode(2)
	}
	if len(e.errs) > 0 {
		return c, errors.Join(e.errs...)
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	c.CodexConfig = overrides
	if c.Inbox == "" {
		c.Inbox = "local"
		if getenv("PLATFORM_URL") != "" {
			c.Inbox = "molecule"
		}
	}
	switch {
	case c.Inbox != "local" && c.Inbox != "molecule":
		return c, fmt.Errorf("--inbox %q: want molecule or local", c.Inbox)
	case c.Approval != "decline" && c.Approval != "accept":
		return c, fmt.Errorf("--approval %q: want decline or accept", c.Approval)
	case c.MaxChildren < 0:
		return c, fmt.Errorf("--max-children %d: must be >= 0", c.MaxChildren)
	case c.MaxQueue < 1:
		return c, fmt.Errorf("--max-queue %d: must be >= 1", c.MaxQueue)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"idle-ttl", c.IdleTTL}, {"turn-timeout", c.TurnTimeout}, {"post-tool-timeout", c.PostToolTimeout}, {"handshake-timeout", c.HandshakeTimeout}, {"poll-interval", c.PollInterval}, {"platform-timeout", c.PlatformTimeout}} {
		if d.v <= 0 {
			return c, fmt.Errorf("--%s %s: must be positive", d.name, d.v)
		}
	}
	return c, nil
}
