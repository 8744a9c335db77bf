package daemon

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// flagGroup is one section of run's flags in docs/configuration.md: register binds the
// section's flags on e into c, and returns what checks them once they are parsed (and sets on c
// what they imply), nil when there is nothing to check.
type flagGroup struct {
	section  string // the section's heading in docs/configuration.md
	register func(e *envFlags, c *Config) (check func() error)
}

// flagGroups are run's flags by concern, each group in a file of its own (flags_*.go), in the
// order of docs/configuration.md's sections. A new group is its file and one line here.
func flagGroups() []flagGroup {
	return []flagGroup{
		{"The daemon", basicFlags},
		{"The local inbox", inboxFlags},
		{"The pool", poolFlags},
		{"Long threads", compactFlags},
		{"Chats and turns", chatFlags},
		{"Models", modelFlags},
		{"Approvals", approvalFlags},
		{"The ChatGPT login", loginFlags},
		{"Molecule", moleculeFlags},
		{"Retention", retentionFlags},
		{"Stop and reload", lifecycleFlags},
		{"Metrics", metricsFlags},
	}
}

// ParseFlags parses the flags of run on fs, and of the commands that check what run would use
// (doctor), so both read the same flags and environment (getenv) as their fallbacks. A flag
// error is an ExitCode (FlagsError); the usage went to fs's output.
func ParseFlags(fs *flag.FlagSet, args []string, getenv func(string) string) (Config, error) {
	var c Config
	e := &envFlags{fs: fs, getenv: getenv}
	var checks []func() error
	for _, g := range flagGroups() {
		if check := g.register(e, &c); check != nil {
			checks = append(checks, check)
		}
	}
	if err := fs.Parse(args); err != nil {
		return c, FlagsError(err)
	}
	if len(e.errs) > 0 {
		return c, errors.Join(e.errs...)
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	for _, check := range checks {
		if err := check(); err != nil {
			return c, err
		}
	}
	return c, nil
}

// durFlag is a duration flag's name and parsed value, for positive.
type durFlag struct {
	name string
	v    time.Duration
}

// positive refuses the first of ds that is not above 0.
func positive(ds ...durFlag) error {
	for _, d := range ds {
		if d.v <= 0 {
			return fmt.Errorf("--%s %s: must be positive", d.name, d.v)
		}
	}
	return nil
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
	e.fs.IntVar(p, name, envDefault(e, env, def, strconv.Atoi), usage+" (env "+env+")")
}

func (e *envFlags) bool(p *bool, name, env string, def bool, usage string) {
	e.fs.BoolVar(p, name, envDefault(e, env, def, strconv.ParseBool), usage+" (env "+env+")")
}

func (e *envFlags) dur(p *time.Duration, name, env string, def time.Duration, usage string) {
	e.fs.DurationVar(p, name, envDefault(e, env, def, time.ParseDuration), usage+" (env "+env+")")
}

// envDefault is def, or env's value parsed by parse when env is set; a value parse refuses is
// remembered in e.errs and def stays.
func envDefault[T any](e *envFlags, env string, def T, parse func(string) (T, error)) T {
	v := e.getenv(env)
	if v == "" {
		return def
	}
	x, err := parse(v)
	if err != nil {
		e.errs = append(e.errs, fmt.Errorf("env %s=%q: %w", env, v, err))
		return def
	}
	return x
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }
