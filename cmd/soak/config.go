package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"
)

// Config is everything a soak run is configured with.
type Config struct {
	CodexBin      string
	SupervisorBin string
	Size          string
	// Seed drives every random choice of the harness (schedule, model faults, injection order)
	// and the fake platform's chaos; 0 picks one from the clock. It is printed so that a failing
	// run can be repeated (timing still varies: processes race).
	Seed uint64
	Keep bool

	// Chats is the number of chats: one canvas chat (when Canvas) and peers for the rest.
	Chats    int
	Canvas   bool
	Messages int // per chat
	// Duration is the injection phase; chaos runs during it and stops at its end.
	Duration time.Duration

	DaemonKills   int
	ChildKills    int
	PlatformHangs int // single hung platform calls (each costs the daemon's 30 s request timeout)
	CursorGone    int // 410 Gone answers to the activity poll
	// FlakyEpisodes are windows in which a PlatformFailRate fraction of polls and replies get 502.
	FlakyEpisodes    int
	PlatformFailRate float64
	ModelHangRate    float64
	ModelFailRate    float64

	// Daemon settings.
	TurnTimeout  time.Duration
	IdleTTL      time.Duration
	PollInterval time.Duration
	DrainTimeout time.Duration
	MaxChildren  int
	Spares       int

	// SettleTimeout bounds the wait for every message to be answered once chaos stopped;
	// Deadline bounds the whole run.
	SettleTimeout time.Duration
	Deadline      time.Duration
}

// preset is a size's defaults for the knobs the user did not set.
type preset struct {
	chats, messages                                int
	duration                                       time.Duration
	daemonKills, childKills, hangs, gone, episodes int
	failRate, modelHang, modelFail                 float64
	idleTTL, settle, deadline                      time.Duration
}

func presets() map[string]preset {
	return map[string]preset{
		// ~5 minutes on 2 shared cores.
		"default": {chats: 12, messages: 22, duration: 240 * time.Second, daemonKills: 5, childKills: 12, hangs: 4, gone: 2,
			episodes: 5, failRate: 0.15, modelHang: 0.07, modelFail: 0.07, idleTTL: 8 * time.Second,
			settle: 150 * time.Second, deadline: 10 * time.Minute},
		// ~1 minute.
		"ci": {chats: 6, messages: 8, duration: 35 * time.Second, daemonKills: 2, childKills: 4, hangs: 2, gone: 1,
			episodes: 2, failRate: 0.15, modelHang: 0.08, modelFail: 0.08, idleTTL: 4 * time.Second,
			settle: 90 * time.Second, deadline: 4 * time.Minute},
	}
}

// parseConfig parses the flags; a size preset fills every knob not given explicitly.
func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	var c Config
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.CodexBin, "codex-bin", getenv("CODEX_BIN"), "native codex binary (env CODEX_BIN)")
	fs.StringVar(&c.SupervisorBin, "supervisor-bin", "./bin/supervisor", "the daemon binary (make build)")
	fs.StringVar(&c.Size, "size", "default", "preset: default (~5 min) or ci (~1 min)")
	fs.Uint64Var(&c.Seed, "seed", 0, "random seed; 0 picks one (printed)")
	fs.BoolVar(&c.Keep, "keep", false, "keep the temp dir (state, daemon logs) even when the soak passes")
	fs.IntVar(&c.Chats, "chats", 0, "chats (one canvas chat, the rest peers); 0: preset")
	fs.BoolVar(&c.Canvas, "canvas", true, "make one of the chats the canvas user")
	fs.IntVar(&c.Messages, "messages", 0, "messages per chat; 0: preset")
	fs.DurationVar(&c.Duration, "duration", 0, "injection and chaos phase; 0: preset")
	fs.IntVar(&c.DaemonKills, "daemon-kills", -1, "daemon SIGKILL+restarts; -1: preset")
	fs.IntVar(&c.ChildKills, "child-kills", -1, "codex child SIGKILLs; -1: preset")
	fs.IntVar(&c.PlatformHangs, "platform-hangs", -1, "hung platform calls (poll, notify, a2a); -1: preset")
	fs.IntVar(&c.CursorGone, "cursor-gone", -1, "410 Gone answers to the poll; -1: preset")
	fs.IntVar(&c.FlakyEpisodes, "flaky-episodes", -1, "windows of 502s on poll and replies; -1: preset")
	fs.Float64Var(&c.PlatformFailRate, "platform-fail-rate", -1, "fraction of calls answered 502 in a flaky window; -1: preset")
	fs.Float64Var(&c.ModelHangRate, "model-hang-rate", -1, "fraction of model requests that hang; -1: preset")
	fs.Float64Var(&c.ModelFailRate, "model-fail-rate", -1, "fraction of model requests answered 500; -1: preset")
	fs.DurationVar(&c.TurnTimeout, "turn-timeout", 6*time.Second, "daemon --turn-timeout: cuts hung model turns")
	fs.DurationVar(&c.IdleTTL, "idle-ttl", 0, "daemon --idle-ttl: idle children close, so the end state has none; 0: preset")
	fs.DurationVar(&c.PollInterval, "poll-interval", 100*time.Millisecond, "daemon --poll-interval")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", 2*time.Second, "daemon --drain-timeout")
	fs.IntVar(&c.MaxChildren, "max-children", 0, "daemon --max-children; 0: two thirds of the chats, so eviction happens")
	fs.IntVar(&c.Spares, "spares", 1, "daemon --spares (the daemon's default); chaos kills hit spares too")
	fs.DurationVar(&c.SettleTimeout, "settle-timeout", 0, "bound on the wait for all replies after chaos; 0: preset")
	fs.DurationVar(&c.Deadline, "deadline", 0, "bound on the whole run; 0: preset")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	p, ok := presets()[c.Size]
	if !ok {
		return c, fmt.Errorf("--size %q: want default or ci", c.Size)
	}
	setInt := func(v *int, unset, def int) {
		if *v == unset {
			*v = def
		}
	}
	setFloat := func(v *float64, def float64) {
		if *v < 0 {
			*v = def
		}
	}
	setDur := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	setInt(&c.Chats, 0, p.chats)
	setInt(&c.Messages, 0, p.messages)
	setDur(&c.Duration, p.duration)
	setInt(&c.DaemonKills, -1, p.daemonKills)
	setInt(&c.ChildKills, -1, p.childKills)
	setInt(&c.PlatformHangs, -1, p.hangs)
	setInt(&c.CursorGone, -1, p.gone)
	setInt(&c.FlakyEpisodes, -1, p.episodes)
	setFloat(&c.PlatformFailRate, p.failRate)
	setFloat(&c.ModelHangRate, p.modelHang)
	setFloat(&c.ModelFailRate, p.modelFail)
	setDur(&c.IdleTTL, p.idleTTL)
	setDur(&c.SettleTimeout, p.settle)
	setDur(&c.Deadline, p.deadline)
	if c.MaxChildren == 0 {
		c.MaxChildren = max(2, (c.Chats+1)*2/3)
	}
	return c, c.validate()
}

func (c Config) validate() error {
	switch {
	case c.CodexBin == "":
		return errors.New("--codex-bin (or CODEX_BIN) is required: the soak runs the real codex")
	case c.SupervisorBin == "":
		return errors.New("--supervisor-bin is required")
	case c.Chats < 1 || c.Messages < 1:
		return fmt.Errorf("--chats %d and --messages %d must be at least 1", c.Chats, c.Messages)
	case c.Duration <= 0:
		return fmt.Errorf("--duration %s must be positive", c.Duration)
	case c.DaemonKills < 0 || c.ChildKills < 0 || c.PlatformHangs < 0 || c.CursorGone < 0 || c.FlakyEpisodes < 0:
		return errors.New("kill, hang, gone and episode counts must not be negative")
	case c.PlatformFailRate > 1 || c.ModelHangRate+c.ModelFailRate > 1:
		return errors.New("rates are fractions: --platform-fail-rate ≤ 1, --model-hang-rate + --model-fail-rate ≤ 1")
	case c.TurnTimeout <= 0 || c.IdleTTL <= 0 || c.PollInterval <= 0 || c.DrainTimeout <= 0:
		return errors.New("--turn-timeout, --idle-ttl, --poll-interval and --drain-timeout must be positive")
	case c.MaxChildren < 1:
		return fmt.Errorf("--max-children %d must be at least 1", c.MaxChildren)
	case c.Spares < 0 || c.Spares >= c.MaxChildren:
		return fmt.Errorf("--spares %d must be at least 0 and below --max-children %d", c.Spares, c.MaxChildren)
	}
	return nil
}
