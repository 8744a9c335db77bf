package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

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
