package daemon

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/local"
	"github.com/molecule-ai/codex-warm/bridge/molecule"
	"github.com/molecule-ai/codex-warm/internal/codexauth"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// Config is everything `supervisor run` is configured with. Every flag has an environment
// fallback so the daemon drops into the Python daemon's deployment unchanged.
type Config struct {
	CodexBin string
	// CodexBinFrom names where CodexBin came from: "--codex-bin", "CODEX_BIN", or "" when
	// neither was given (doctor says so).
	CodexBinFrom string
	CodexConfig  []string
	StateDir     string
	Inbox        string
	Listen       string
	// InboxToken protects the local inbox (from --inbox-token or the file --inbox-token-file).
	InboxToken string
	// InboxAllowHosts are Host names the local inbox accepts besides loopback: the listen host
	// when it is not a loopback address.
	InboxAllowHosts   []string
	InboxAllowOrigins []string
	// MetricsListen is the address of the metrics listener (/metrics, /healthz, /readyz); empty:
	// none. MetricsToken protects it (a token of its own: a scraper must not be able to run
	// turns, and a Molecule daemon has no inbox token). MetricsAllowHosts is its listen host when
	// that is not loopback.
	MetricsListen     string
	MetricsToken      string
	MetricsAllowHosts []string
	InboxMaxConns     int
	InboxBodyTimeout  time.Duration
	InboxWriteTimeout time.Duration
	SlotWait          time.Duration
	MaxSlotWaiters    int
	// ChildUser runs the codex children as this user (name or uid).
	ChildUser   string
	Cwd         string
	MaxChildren int
	// ThreadsPerChild is how many chats' threads share one codex child (supervisor.Config).
	ThreadsPerChild int
	Spares          int
	// WarmSpares warms each spare up before a chat takes it (a throwaway turn against the
	// daemon's canned responder on loopback).
	WarmSpares bool
	// LeanChildren gives children the settings that cut every turn's cost without changing what
	// the model receives (lean.go); an operator's own setting of a key wins.
	LeanChildren    bool
	ChatCommands    bool
	Busy            supervisor.BusyPolicy
	MaxQueue        int
	IdleTTL         time.Duration
	TurnTimeout     time.Duration
	PostToolTimeout time.Duration
	// ModelUnreachableTimeout ends a turn whose model could not be reached this long.
	ModelUnreachableTimeout time.Duration
	// ModelSilentTimeout ends a turn whose model sent nothing this long (0: off).
	ModelSilentTimeout time.Duration
	HandshakeTimeout   time.Duration
	DrainTimeout       time.Duration
	TakeoverTimeout    time.Duration
	PollInterval       time.Duration
	// EventStream subscribes to the Molecule workspace's event stream and polls when it
	// announces a message; SafetyPollInterval is the poll's interval while the stream is up.
	EventStream        bool
	SafetyPollInterval time.Duration
	// ToolChips posts a canvas chat's tool calls as the canvas's tool chips.
	ToolChips bool
	// HeartbeatInterval is the Molecule heartbeat's period (its current_task shows what runs).
	HeartbeatInterval time.Duration
	PlatformTimeout   time.Duration
	// PeerTurnTimeout is an A2A reply's X-Timeout (the send waits that long and a grace);
	// PeerExchanges caps automatic exchanges in a row with one peer.
	PeerTurnTimeout time.Duration
	PeerExchanges   int
	Approval        string
	ApprovalTimeout time.Duration
	// ProgressInterval: a canvas chat whose turn runs this long gets a short progress note each
	// interval; 0 turns the notes off.
	ProgressInterval time.Duration
	// ParkLimit bounds how long a Molecule message waits for a usage limit's reset.
	ParkLimit time.Duration
	// ResumeSpacing paces parked messages at a usage limit's reset.
	ResumeSpacing time.Duration
	LogLevel      string
	LogFormat     string

	// MemoryBudget bounds the children's summed PSS in bytes: 0 for supervisor's default, -1 for
	// none. MemoryBudgetFraction, when set instead, is the share of MemAvailable at start.
	MemoryBudget         int64
	MemoryBudgetFraction float64
	// ChildMemoryLimit recycles a child whose private memory passed it (bytes; 0: off).
	ChildMemoryLimit int64
	ChildMaxAge      time.Duration
	ChildMaxTurns    int
	// CompactAfterTurns and CompactAboveBytes are the long-thread policy (compactflags.go).
	CompactAfterTurns int
	CompactAboveBytes int64
	// ChatGPTTokens says who renews a ChatGPT login (docs/login.md): auto (the platform when it
	// provides the login, else the daemon), platform, own (the daemon), or off (each child).
	ChatGPTTokens string
	// ChatGPTPlatformCheck is how often a login the platform owns is read again.
	ChatGPTPlatformCheck time.Duration
	// TokenRefreshAhead is how long before the access token expires the daemon refreshes it.
	TokenRefreshAhead time.Duration

	// ArchiveIdleAfter, DeleteArchivedAfter, ArchiveSweepEvery: retention (retention.go).
	ArchiveIdleAfter, DeleteArchivedAfter, ArchiveSweepEvery, UploadsMaxAge time.Duration

	// Models is what chats may choose with /model and /effort (flags_model.go).
	Models ModelConfig
}

// DefaultStateDir is the Python daemon's state directory, so its sessions.json is picked up.
func DefaultStateDir(getenv func(string) string) string {
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

// ParseFlags parses the flags of run on fs, and of the commands that check what run would use
// (doctor), so both read the same flags and environment (getenv) as their fallbacks. A flag
// error is an ExitCode (FlagsError); the usage went to fs's output.
func ParseFlags(fs *flag.FlagSet, args []string, getenv func(string) string) (Config, error) {
	var c Config
	e := &envFlags{fs: fs, getenv: getenv}
	e.str(&c.CodexBin, "codex-bin", "CODEX_BIN", "", "native codex binary (the npm wrapper is resolved to it); default: the codex beside supervisor, else the one in PATH")
	e.str(&c.StateDir, "state-dir", "CODEX_CHANNEL_MOLECULE_STATE_DIR", DefaultStateDir(getenv), "state directory (sessions.json, inbox position, control socket)")
	e.str(&c.Inbox, "inbox", "CODEX_WARM_INBOX", "", "molecule or local; default: molecule when the platform URL is set (MOLECULE_API_URL, MOLECULE_URL, PLATFORM_URL or MOLECULE_PLATFORM_URL), else local")
	e.str(&c.Listen, "listen", "CODEX_WARM_LISTEN", "127.0.0.1:8377", "address of the local inbox HTTP API")
	var tokenFile string
	// Not bound through e.str: a flag default is printed by -h, and this one is a secret.
	fs.StringVar(&c.InboxToken, "inbox-token", "", "bearer token the local inbox requires on every request (env CODEX_WARM_INBOX_TOKEN; prefer it or --inbox-token-file: a flag shows in ps)")
	e.str(&tokenFile, "inbox-token-file", "CODEX_WARM_INBOX_TOKEN_FILE", "", "file holding the local inbox token")
	e.str(&c.MetricsListen, "metrics-listen", "CODEX_WARM_METRICS_LISTEN", "", "address of the Prometheus metrics listener (/metrics, /healthz, /readyz), e.g. 127.0.0.1:9477; default: off. Loopback only unless --metrics-token is set")
	fs.StringVar(&c.MetricsToken, "metrics-token", "", "bearer token the metrics listener requires (env CODEX_WARM_METRICS_TOKEN; prefer it: a flag shows in ps)")
	var origins listFlag
	fs.Var(&origins, "inbox-allow-origin", "Origin the local inbox accepts (scheme://host[:port]; repeatable); requests with any other Origin header are refused")
	e.int(&c.InboxMaxConns, "inbox-max-conns", "CODEX_WARM_INBOX_MAX_CONNS", local.DefaultMaxConns, "open connections to the local inbox; more are answered 503 at once")
	e.dur(&c.InboxBodyTimeout, "inbox-body-timeout", "CODEX_WARM_INBOX_BODY_TIMEOUT", local.DefaultBodyTimeout, "time a local inbox client has to send its headers, and then its body")
	e.dur(&c.InboxWriteTimeout, "inbox-write-timeout", "CODEX_WARM_INBOX_WRITE_TIMEOUT", local.DefaultWriteTimeout, "time a local inbox client has to take each write of its answer (the answer, or one event of a stream); one that stops reading is disconnected")
	e.dur(&c.SlotWait, "slot-wait", "CODEX_WARM_SLOT_WAIT", supervisor.DefaultSlotWait, "how long a new chat waits for a codex slot when all are busy before it is answered busy")
	e.int(&c.MaxSlotWaiters, "max-slot-waiters", "CODEX_WARM_MAX_SLOT_WAITERS", supervisor.DefaultMaxSlotWaiters, "chats waiting for a codex slot at once; more are answered busy at once")
	e.str(&c.ChildUser, "child-user", "CODEX_WARM_CHILD_USER", "", "run codex children as this user (name or uid; the daemon must run as root): the commands codex runs then cannot read the daemon's state or process")
	e.str(&c.Cwd, "cwd", "CODEX_WARM_CWD", "", "working directory of codex threads; default: the daemon's")
	e.int(&c.MaxChildren, "max-children", "CODEX_WARM_MAX_CHILDREN", supervisor.DefaultMaxChildren, "hard cap on live codex children; the memory budget usually binds first")
	var budget, memLimit string
	e.str(&budget, "memory-budget", "CODEX_WARM_MEMORY_BUDGET", "", "bound on the codex children's summed PSS: a size (2GiB, 500MB), a fraction of MemAvailable at start (0.5), or off; default: half of MemAvailable")
	e.str(&memLimit, "child-memory-limit", "CODEX_WARM_CHILD_MEMORY_LIMIT", "2GiB", "recycle a codex child whose private memory passed this size (idle: at once; busy: after its turn); off disables")
	e.dur(&c.ChildMaxAge, "child-max-age", "CODEX_WARM_CHILD_MAX_AGE", 0, "recycle a codex child older than this (idle: at once; busy: after its turn); 0: never")
	e.int(&c.ChildMaxTurns, "child-max-turns", "CODEX_WARM_CHILD_MAX_TURNS", 0, "recycle a codex child after this many turns; 0: never")
	var compact compactFlags
	compact.register(e)
	// One spare: a new chat's first message then skips spawn + initialize (~80 ms measured) and,
	// with no stored thread, thread/start (~22 ms). An idle spare costs ~12 MB private memory.
	e.int(&c.ThreadsPerChild, "threads-per-child", "CODEX_WARM_THREADS_PER_CHILD", 1, "chats' threads one codex child hosts; above 1 more chats stay warm per GB, and one crash touches up to this many chats (docs/operating.md)")
	e.int(&c.Spares, "spares", "CODEX_WARM_SPARES", 1, "codex children kept started, with a thread open, for new chats' first messages; they count against --max-children; 0 turns them off")
	e.bool(&c.WarmSpares, "warm-spares", "CODEX_WARM_WARM_SPARES", true, "before a spare is handed to a chat, run one throwaway turn in it against a canned model on loopback (nothing leaves the machine), so the chat's first message is as fast as its later ones")
	e.bool(&c.LeanChildren, "lean-children", "CODEX_WARM_LEAN_CHILDREN", true, "run codex children with features.skill_search=false and feedback.enabled=false unless codex's config sets them, and without SSL_CERT_DIR when SSL_CERT_FILE is that directory's bundle; false leaves both to codex's defaults and the environment")
	e.bool(&c.ChatCommands, "chat-commands", "CODEX_WARM_CHAT_COMMANDS", true, "answer /stop, /new, /status and /help in chats; false sends them to codex as text")
	var busy string
	e.str(&busy, "busy", "CODEX_WARM_BUSY", string(supervisor.BusyQueue), "a message for a chat whose turn runs: queue (wait for its own turn), steer (join the running turn; one reply answers both) or interrupt (stop the running turn, then run)")
	e.int(&c.MaxQueue, "max-queue", "CODEX_WARM_MAX_QUEUE", 16, "messages waiting per chat before it answers busy")
	retentionFlags(e, &c)
	modelFlags(e, &c)
	e.dur(&c.IdleTTL, "idle-ttl", "CODEX_WARM_IDLE_TTL", 15*time.Minute, "close a child idle for this long")
	e.dur(&c.TurnTimeout, "turn-timeout", "CODEX_WARM_TURN_TIMEOUT", 600*time.Second, "interrupt a turn running this long")
	e.dur(&c.PostToolTimeout, "post-tool-timeout", "CODEX_WARM_POST_TOOL_TIMEOUT", 90*time.Second, "retire a child silent this long after a tool finished")
	e.dur(&c.ModelUnreachableTimeout, "model-unreachable-timeout", "CODEX_WARM_MODEL_UNREACHABLE_TIMEOUT", supervisor.DefaultModelUnreachable, "end a turn whose model service could not be reached this long (codex retries forever); the chat is told, Molecule messages are answered when it is back; later turns of the outage end at once")
	e.dur(&c.ModelSilentTimeout, "model-silent-timeout", "CODEX_WARM_MODEL_SILENT_TIMEOUT", supervisor.DefaultModelSilent, "end a turn whose model service accepted the request and sent nothing this long (codex waits on such a model for good), as an unreachable model; a model that starts answering is never cut by it (0: off)")
	e.dur(&c.ParkLimit, "park-limit", "CODEX_WARM_PARK_LIMIT", molecule.DefaultParkLimit, "Molecule: a message the account's usage limit holds waits for the reset this long at most (from its arrival); a later reset is answered with the limit and the reset time")
	e.dur(&c.ResumeSpacing, "resume-spacing", "CODEX_WARM_RESUME_SPACING", supervisor.DefaultResumeSpacing, "at a usage limit's reset, run the parked messages one every this long, oldest first")
	e.dur(&c.HandshakeTimeout, "handshake-timeout", "CODEX_WARM_HANDSHAKE_TIMEOUT", 30*time.Second, "retire a child that does not finish initialize in time")
	e.dur(&c.DrainTimeout, "drain-timeout", "CODEX_WARM_DRAIN_TIMEOUT", 30*time.Second, "on SIGTERM, let running turns finish this long before interrupting them")
	e.dur(&c.TakeoverTimeout, "takeover-timeout", "CODEX_WARM_TAKEOVER_TIMEOUT", defaultTakeoverTimeout, "reload: a new image that does not serve within this long gives everything back to the previous binary (docs/HANDOFF.md)")
	e.dur(&c.PollInterval, "poll-interval", "CODEX_WARM_POLL_INTERVAL", molecule.DefaultPollInterval, "Molecule activity poll interval (the platform allows 600 requests a minute, shared by the whole org when MOLECULE_ORG_ID is set); with the event stream up, the poll runs every --safety-poll-interval instead")
	e.bool(&c.EventStream, "event-stream", "CODEX_WARM_EVENT_STREAM", true, "Molecule: subscribe to the workspace's event stream and poll as soon as it announces a message (false: poll every --poll-interval only)")
	e.bool(&c.ToolChips, "tool-chips", "CODEX_WARM_TOOL_CHIPS", true, "Molecule: show each completed tool call of a canvas chat's turn on the canvas as a tool chip (an agent_log row, at most one a second, dropped first when the rate budget runs low)")
	e.dur(&c.SafetyPollInterval, "safety-poll-interval", "CODEX_WARM_SAFETY_POLL_INTERVAL", molecule.DefaultSafetyPollInterval, "Molecule: the activity poll's interval while the event stream is up, to catch what the stream lost")
	e.dur(&c.HeartbeatInterval, "heartbeat-interval", "CODEX_WARM_HEARTBEAT_INTERVAL", molecule.DefaultHeartbeatInterval, "Molecule heartbeat interval (the heartbeat's current_task shows what each running turn does)")
	e.dur(&c.PlatformTimeout, "platform-timeout", "CODEX_WARM_PLATFORM_TIMEOUT", 30*time.Second, "bound on one Molecule platform call (poll, reply, heartbeat)")
	e.dur(&c.PeerTurnTimeout, "peer-turn-timeout", "CODEX_WARM_PEER_TURN_TIMEOUT", molecule.DefaultPeerTurnTimeout, "Molecule: how long a reply to a peer agent may wait for the peer's answer, sent as X-Timeout (a push peer answers after its whole turn)")
	e.int(&c.PeerExchanges, "peer-exchanges", "CODEX_WARM_PEER_EXCHANGES", molecule.DefaultPeerExchanges, "Molecule: answer at most this many messages in a row from one peer agent that came after a reply to it (answers to our answers); then its messages go unanswered (logged) until this workspace's canvas writes or the peer is quiet for 10 minutes, so two agents cannot answer each other forever")
	e.str(&c.Approval, "approval", "CODEX_WARM_APPROVAL", "decline", "answer to codex command and file-change approval requests: decline, accept, or ask (the chat answers /approve or /deny)")
	e.dur(&c.ApprovalTimeout, "approval-timeout", "CODEX_WARM_APPROVAL_TIMEOUT", supervisor.DefaultApprovalTimeout, "with --approval ask, decline an approval nobody answered this long")
	e.dur(&c.ProgressInterval, "progress-interval", "CODEX_WARM_PROGRESS_INTERVAL", 0, "Molecule: send a canvas chat a short progress note each interval while its turn runs (0: off)")
	e.str(&c.ChatGPTTokens, "chatgpt-tokens", "CODEX_WARM_CHATGPT_TOKENS", "auto", "who renews a ChatGPT login: auto (the platform when it provides the login: CODEX_AUTH_JSON in the environment or in the Molecule workspace's secrets; else the daemon), platform (the daemon only reads the platform's login and never refreshes it), own (the daemon refreshes the login in CODEX_HOME once for every codex child and writes it back), off (each child refreshes its own)")
	e.dur(&c.ChatGPTPlatformCheck, "chatgpt-platform-check", "CODEX_WARM_CHATGPT_PLATFORM_CHECK", codexauth.DefaultPlatformCheck, "read a ChatGPT login the platform owns again this often, and hand a renewed one to every codex child")
	e.dur(&c.TokenRefreshAhead, "token-refresh-ahead", "CODEX_WARM_TOKEN_REFRESH_AHEAD", 5*time.Minute, "refresh the daemon-held ChatGPT access token this long before it expires")
	e.str(&c.LogLevel, "log-level", "CODEX_WARM_LOG_LEVEL", "info", "debug, info, warn or error")
	e.str(&c.LogFormat, "log-format", "CODEX_WARM_LOG_FORMAT", "json", "json or console")
	var overrides listFlag
	fs.Var(&overrides, "codex-config", "extra codex -c key=value override (repeatable)")
	if err := fs.Parse(args); err != nil {
		return c, FlagsError(err)
	}
	if len(e.errs) > 0 {
		return c, errors.Join(e.errs...)
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	c.CodexBinFrom = CodexBinSource(fs, c.CodexBin)
	var err error
	if c.MemoryBudget, c.MemoryBudgetFraction, err = parseMemoryBudget(budget); err != nil {
		return c, fmt.Errorf("--memory-budget %q: %w", budget, err)
	}
	if c.ChildMemoryLimit, err = parseMemoryLimit(memLimit); err != nil {
		return c, fmt.Errorf("--child-memory-limit %q: %w", memLimit, err)
	}
	if err := compact.apply(&c); err != nil {
		return c, err
	}
	if c.Busy, err = supervisor.ParseBusyPolicy(busy); err != nil {
		return c, fmt.Errorf("--busy: %w", err)
	}
	c.CodexConfig = overrides
	c.InboxAllowOrigins = origins
	if c.InboxToken == "" {
		c.InboxToken = getenv("CODEX_WARM_INBOX_TOKEN")
	}
	if c.MetricsToken == "" {
		c.MetricsToken = getenv("CODEX_WARM_METRICS_TOKEN")
	}
	if c.Inbox == "" {
		c.Inbox = "local"
		if name, _ := molecule.FirstEnv(getenv, molecule.PlatformURLEnv); name != "" {
			c.Inbox = "molecule"
		}
	}
	switch {
	case c.Inbox != "local" && c.Inbox != "molecule":
		return c, fmt.Errorf("--inbox %q: want molecule or local", c.Inbox)
	case !slices.Contains([]string{tokensAuto, tokensPlatform, tokensOwn, tokensOff}, c.ChatGPTTokens):
		return c, fmt.Errorf("--chatgpt-tokens %q: want auto, platform, own or off", c.ChatGPTTokens)
	case c.ChatGPTPlatformCheck <= 0:
		return c, fmt.Errorf("--chatgpt-platform-check %s: must be > 0", c.ChatGPTPlatformCheck)
	case c.TokenRefreshAhead <= 0:
		return c, fmt.Errorf("--token-refresh-ahead %s: must be > 0", c.TokenRefreshAhead)
	case c.TakeoverTimeout <= 0:
		return c, fmt.Errorf("--takeover-timeout %s: must be > 0", c.TakeoverTimeout)
	case c.Approval != "decline" && c.Approval != "accept" && c.Approval != "ask":
		return c, fmt.Errorf("--approval %q: want decline, accept or ask", c.Approval)
	case c.Approval == "ask" && !c.ChatCommands:
		return c, errors.New("--approval ask needs --chat-commands: the chat answers with /approve or /deny")
	case c.ApprovalTimeout <= 0:
		return c, fmt.Errorf("--approval-timeout %s: must be > 0", c.ApprovalTimeout)
	case c.ProgressInterval < 0:
		return c, fmt.Errorf("--progress-interval %s: must be >= 0", c.ProgressInterval)
	case c.MaxChildren < 0:
		return c, fmt.Errorf("--max-children %d: must be >= 0", c.MaxChildren)
	case c.ThreadsPerChild < 1:
		return c, fmt.Errorf("--threads-per-child %d: must be >= 1", c.ThreadsPerChild)
	case c.Spares < 0:
		return c, fmt.Errorf("--spares %d: must be >= 0", c.Spares)
	case c.ChildMaxTurns < 0:
		return c, fmt.Errorf("--child-max-turns %d: must be >= 0", c.ChildMaxTurns)
	case c.ChildMaxAge < 0:
		return c, fmt.Errorf("--child-max-age %s: must be >= 0", c.ChildMaxAge)
	case c.ParkLimit <= 0:
		return c, fmt.Errorf("--park-limit %s: must be > 0", c.ParkLimit)
	case c.ResumeSpacing <= 0:
		return c, fmt.Errorf("--resume-spacing %s: must be > 0", c.ResumeSpacing)
	case c.ModelUnreachableTimeout <= 0:
		return c, fmt.Errorf("--model-unreachable-timeout %s: must be > 0", c.ModelUnreachableTimeout)
	case c.MaxQueue < 1:
		return c, fmt.Errorf("--max-queue %d: must be >= 1", c.MaxQueue)
	case c.InboxMaxConns < 1:
		return c, fmt.Errorf("--inbox-max-conns %d: must be >= 1", c.InboxMaxConns)
	case c.MaxSlotWaiters < 1:
		return c, fmt.Errorf("--max-slot-waiters %d: must be >= 1", c.MaxSlotWaiters)
	case c.PeerExchanges < 1:
		return c, fmt.Errorf("--peer-exchanges %d: must be >= 1", c.PeerExchanges)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"idle-ttl", c.IdleTTL}, {"turn-timeout", c.TurnTimeout}, {"post-tool-timeout", c.PostToolTimeout}, {"handshake-timeout", c.HandshakeTimeout}, {"poll-interval", c.PollInterval}, {"safety-poll-interval", c.SafetyPollInterval}, {"heartbeat-interval", c.HeartbeatInterval}, {"platform-timeout", c.PlatformTimeout}, {"peer-turn-timeout", c.PeerTurnTimeout},
		{"inbox-body-timeout", c.InboxBodyTimeout}, {"inbox-write-timeout", c.InboxWriteTimeout}, {"slot-wait", c.SlotWait}} {
		if d.v <= 0 {
			return c, fmt.Errorf("--%s %s: must be positive", d.name, d.v)
		}
	}
	if err := c.resolveInboxAccess(tokenFile); err != nil {
		return c, err
	}
	if err := c.resolveMetricsAccess(); err != nil {
		return c, err
	}
	return c, nil
}

// byteUnits are the size suffixes parseBytes knows, lower-cased. A bare K, M, G or T is binary,
// as in docker's --memory; KB, MB, GB and TB are decimal.
var byteUnits = map[string]float64{
	"": 1, "b": 1,
	"k": 1 << 10, "ki": 1 << 10, "kib": 1 << 10, "kb": 1e3,
	"m": 1 << 20, "mi": 1 << 20, "mib": 1 << 20, "mb": 1e6,
	"g": 1 << 30, "gi": 1 << 30, "gib": 1 << 30, "gb": 1e9,
	"t": 1 << 40, "ti": 1 << 40, "tib": 1 << 40, "tb": 1e12,
}

// parseBytes reads a size: a number with an optional unit (2GiB, 500MB, 1.5G, 1073741824).
func parseBytes(v string) (int64, error) {
	t := strings.TrimSpace(v)
	num, unit := t, ""
	if i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' }); i >= 0 {
		num, unit = t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	}
	mult, ok := byteUnits[unit]
	if !ok {
		return 0, fmt.Errorf("unknown unit %q: want B, KiB, MiB, GiB, TiB, KB, MB, GB, TB, K, M, G or T", unit)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("want a size such as 2GiB or 500MB")
	}
	b := f * mult
	if b >= math.MaxInt64 {
		return 0, fmt.Errorf("larger than %d bytes", int64(math.MaxInt64))
	}
	return int64(b), nil
}

// parseMemoryBudget reads --memory-budget: empty for the default (bytes 0), off (bytes -1), a
// plain number above 0 and at most 1 for a fraction of MemAvailable, or a size.
func parseMemoryBudget(v string) (bytes int64, fraction float64, err error) {
	switch t := strings.TrimSpace(v); {
	case t == "":
		return 0, 0, nil
	case strings.EqualFold(t, "off"):
		return -1, 0, nil
	default:
		if f, err := strconv.ParseFloat(t, 64); err == nil && f <= 1 {
			if f <= 0 {
				return 0, 0, errors.New("want a size, a fraction of MemAvailable above 0, or off")
			}
			return 0, f, nil
		}
		b, err := parseBytes(t)
		if err != nil {
			return 0, 0, err
		}
		if b == 0 {
			return 0, 0, errors.New("a zero budget: say off for none")
		}
		return b, 0, nil
	}
}

// memoryBudget is the supervisor's Config.MemoryBudget for the flags: 0 (the supervisor's
// default), -1 (none), or bytes, a fraction being read from MemAvailable now.
func (c Config) memoryBudget() (int64, error) {
	if c.MemoryBudgetFraction > 0 {
		b, err := supervisor.MemoryBudgetOf(c.MemoryBudgetFraction)
		if err != nil {
			return 0, fmt.Errorf("--memory-budget: %w", err)
		}
		return b, nil
	}
	return c.MemoryBudget, nil
}

// parseMemoryLimit reads --child-memory-limit: a size, or off (or 0) for none.
func parseMemoryLimit(v string) (int64, error) {
	if strings.EqualFold(strings.TrimSpace(v), "off") {
		return 0, nil
	}
	return parseBytes(v)
}

// resolveInboxAccess reads the inbox token and refuses a local inbox that other machines could
// reach without one.
func (c *Config) resolveInboxAccess(tokenFile string) error {
	switch {
	case c.InboxToken != "" && tokenFile != "":
		return errors.New("set either --inbox-token (CODEX_WARM_INBOX_TOKEN) or --inbox-token-file (CODEX_WARM_INBOX_TOKEN_FILE), not both")
	case tokenFile != "":
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return fmt.Errorf("inbox token file: %w", err)
		}
		c.InboxToken = strings.TrimSpace(string(b))
		if c.InboxToken == "" {
			return fmt.Errorf("inbox token file %s is empty", tokenFile)
		}
	}
	c.InboxToken = strings.TrimSpace(c.InboxToken)
	if strings.ContainsAny(c.InboxToken, "\r\n") {
		return errors.New("the inbox token contains a line break")
	}
	if c.Inbox != "local" {
		return nil
	}
	if err := local.CheckListenAddress(c.Listen, c.InboxToken != ""); err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	if h, _, _ := net.SplitHostPort(c.Listen); h != "" && !local.IsLoopbackHost(h) {
		c.InboxAllowHosts = []string{h}
	}
	return nil
}

// resolveMetricsAccess refuses a metrics listener that other machines could reach without a
// metrics token, by the local inbox's rules.
func (c *Config) resolveMetricsAccess() error {
	c.MetricsToken = strings.TrimSpace(c.MetricsToken)
	if strings.ContainsAny(c.MetricsToken, "\r\n") {
		return errors.New("the metrics token contains a line break")
	}
	if c.MetricsListen == "" {
		return nil
	}
	if err := local.CheckListenAddress(c.MetricsListen, c.MetricsToken != ""); err != nil {
		return fmt.Errorf("--metrics-listen: %w (--metrics-token, CODEX_WARM_METRICS_TOKEN)", err)
	}
	if h, _, _ := net.SplitHostPort(c.MetricsListen); h != "" && !local.IsLoopbackHost(h) {
		c.MetricsAllowHosts = []string{h}
	}
	return nil
}
