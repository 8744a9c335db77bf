package molecule

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/molecule-ai/codex-warm/bridge/chat"
	"github.com/molecule-ai/codex-warm/bridge/molecule/inbound"
	"github.com/molecule-ai/codex-warm/bridge/molecule/ledger"
	"github.com/molecule-ai/codex-warm/bridge/molecule/platform"
	"github.com/molecule-ai/codex-warm/internal/secretset"
)

// workspaceIDPattern is the Molecule runtime's rule for workspace ids (package inbound's).
var workspaceIDPattern = inbound.WorkspaceIDPattern

// validWorkspaceID reports whether id is a Molecule workspace id.
func validWorkspaceID(id string) bool { return inbound.ValidWorkspaceID(id) }

// Defaults of Config. PollInterval is the Molecule runtime's 5 s (inbox.py): the platform's
// rate limit (600 requests a minute) is shared by the whole org when X-Molecule-Org-Id is sent,
// and a workspace polling every second alone would spend a tenth of it.
const (
	DefaultPollInterval = 5 * time.Second
	// DefaultSafetyPollInterval is the poll's interval while the event stream is up: it only
	// catches what the stream lost (events are best effort).
	DefaultSafetyPollInterval = 30 * time.Second
	DefaultHeartbeatInterval  = 20 * time.Second
	DefaultRequestTimeout     = 30 * time.Second
	DefaultMaxPollBytes       = 32 << 20
	DefaultMaxRowBytes        = 16 << 20
	// DefaultMaxImageBytes caps one decoded image: the size hosted models take per image (5 MiB).
	DefaultMaxImageBytes = 5 << 20
	// DefaultMaxImagesBytes caps the decoded images of one message; a row is at most
	// DefaultMaxRowBytes of base64 (12 MiB decoded) anyway.
	DefaultMaxImagesBytes = 10 << 20
	// DefaultMaxPendingImageBytes caps the images held by all messages not yet answered: without
	// it the unacked window (MaxUnacked rows) could hold MaxImagesBytes each, gigabytes. 64 MiB
	// is six messages at the per-message cap, or dozens of phone photos.
	DefaultMaxPendingImageBytes = 64 << 20
	DefaultMaxReplyBytes        = 128 << 10
	DefaultMaxUnacked           = 1024
	DefaultRecentIDs            = 4096
	DefaultDrainTimeout         = 30 * time.Second
	DefaultRetryInitial         = time.Second
	DefaultRetryMax             = 30 * time.Second
	DefaultSinceSecs            = 600
	DefaultAgentName            = "codex"
	// DefaultMaxUploadBytes caps one file fetched from a pending upload and DefaultMaxUploadsBytes
	// all of one message's: the platform's own limits (per_file_bytes and per_request_bytes of
	// GET /uploads/limits, internal/uploads/limits.go), so a file the platform took is taken.
	DefaultMaxUploadBytes  = 100 << 20
	DefaultMaxUploadsBytes = 100 << 20
	// DefaultMaxAttachments is the platform's max_attachments_per_message.
	DefaultMaxAttachments = 10
	// DefaultUploadTimeout bounds the download of one file: the 1200 s the platform gives its own
	// forward of a 100 MB upload (chat_files.go), for a slow link. A body that stops for
	// RequestTimeout fails sooner.
	DefaultUploadTimeout = 20 * time.Minute
	// DefaultBusyRetryFor is how long a message the pool answers busy is tried again before it
	// is answered with the busy text. The pool is busy for as long as its running turns take
	// (seconds to a few minutes; turns are cut off at 10 minutes by default), and each try may
	// itself wait for a slot (--slot-wait, 30 s by default): 5 minutes is several turns and ten
	// slot waits, yet a user still hears within minutes that nothing will come.
	DefaultBusyRetryFor = 5 * time.Minute
	// minTextCap keeps room for the truncation note in a capped text.
	minTextCap = 256
)

// StateFileName is the inbox's durable inbox position inside the state directory (package
// ledger's file, named here for the tools that read a daemon's state).
const StateFileName = ledger.StateFileName

// Config configures a Molecule inbox. ConfigFromEnv fills the platform fields from
// the same environment the Python daemon reads; the caller adds Answerer and Logger. Zero
// durations and sizes mean the defaults above.
type Config struct {
	// PlatformURL is the platform's base URL (MOLECULE_API_URL or an alias, see ConfigFromEnv),
	// http or https, no user info.
	PlatformURL string
	// WorkspaceID is this workspace (MOLECULE_WORKSPACE_ID, or WORKSPACE_ID).
	WorkspaceID string
	// Token is the workspace bearer token at start (<configs>/.auth_token, else
	// MOLECULE_WORKSPACE_TOKEN). It is never logged.
	Token string
	// TokenFile is where the token rotates (MOLECULE_WORKSPACE_TOKEN_FILE, else
	// <configs>/.auth_token): once it holds another token,
	// that one is used, and a token register issues is saved there. Empty: the token never
	// changes and an issued one lasts until the daemon stops.
	TokenFile string
	// OrgID is sent as X-Molecule-Org-Id when set (MOLECULE_ORG_ID).
	OrgID string
	// StateDir holds bridge-state.json (CODEX_CHANNEL_MOLECULE_STATE_DIR, default
	// ~/.codex-channel-molecule/, the Python daemon's directory, so sessions.json sits beside it).
	StateDir string
	// AgentName is agent_card.name at register.
	AgentName string

	// Answerer runs the turns; required.
	Answerer chat.Answerer
	// HandOff, when set, takes a chat's messages in order without waiting for the previous
	// reply, so that a message reaches the supervisor while the chat's turn runs (--busy steer
	// or interrupt). Nil: each message of a chat waits until the one before it was answered and
	// delivered (Answerer.Submit).
	HandOff Enqueuer
	// Limits, when set, parks messages the account's usage limit keeps from codex until the
	// reset (rows unacknowledged, the chat told once); nil answers them with the limit.
	Limits Parker
	// ParkLimit bounds how long a message may wait for a usage limit's reset, counted from its
	// arrival: a reset later than that is answered with the limit and the reset time. Default
	// DefaultParkLimit.
	ParkLimit time.Duration
	// Controls carries out chat commands (/stop, /new, /status, /help) sent by canvas users and
	// peers; nil turns them off, and such messages go to codex as text.
	Controls chat.Controls
	// Progress, when set, tells the heartbeat's current_task what each running turn is doing
	// (`peer:alpha: running "npm test" (2m10s)`); nil: it names the chat being answered.
	Progress ProgressSource
	// Resetter, when set, starts the canvas chat over when the canvas user pressed New session
	// (session.go); nil: a New session is not followed.
	Resetter Resetter
	// Health, when set, lets the heartbeat report runtime_state "wedged" while codex children
	// crash-loop: WedgedAfter crashes with no turn completed since (health.go).
	Health RuntimeHealth
	// WedgedAfter is that number of crashes; default DefaultWedgedAfter.
	WedgedAfter int
	// ProgressInterval, when positive (and Progress is set), sends a canvas chat a short note
	// each interval while its message's turn runs: "still working (4m0s): running \"npm test\"
	// (1m10s)". Peers get none: a note would be a message to the peer agent. Default 0: off.
	ProgressInterval time.Duration
	// Logger; nil means no logging.
	Logger *zap.Logger
	// HTTPClient carries every platform call; nil means a private client whose idle
	// connections are closed when Run returns. The inbox uses a copy that never follows a
	// redirect (the token stays with PLATFORM_URL's origin); the caller's client is not changed.
	HTTPClient *http.Client

	PollInterval      time.Duration
	HeartbeatInterval time.Duration
	// EventStream subscribes to the workspace's event stream once registered (stream.go): a
	// message is polled for as soon as the platform announces it, and the poll runs every
	// SafetyPollInterval (default DefaultSafetyPollInterval) while the stream is up, every
	// PollInterval while it is down or the platform has none.
	EventStream        bool
	SafetyPollInterval time.Duration
	// ToolChips posts each completed tool call of a canvas chat's turn as an agent_log row, which
	// the canvas shows as a tool chip and the live progress line (chips.go).
	ToolChips bool
	// RequestTimeout bounds each platform call.
	RequestTimeout time.Duration
	// MaxPollBytes bounds the row text one poll holds in memory, whatever the size of the
	// activity page: the page is read as a stream and a larger one is read in pieces. With a
	// cursor (oldest first) reading stops there and the next poll continues after the last row
	// kept; without one (the newest-first window of the first start and after a 410) the oldest
	// rows within the bound are kept, answered first, and the polls that follow read the rest.
	MaxPollBytes int64
	// MaxRowBytes caps one activity row (at most MaxPollBytes). A longer row is streamed past
	// without being held, its top-level id read on the way, and judged poison: logged once with
	// its id, counted, moved past.
	MaxRowBytes int64
	// MaxTextBytes caps the text of one inbound message given to codex; longer text is cut and a
	// note says how much was omitted.
	MaxTextBytes int
	// MaxImageBytes caps one image file part (decoded) codex is shown; MaxImagesBytes all of one
	// message's. An image over a cap is named in the attachment note instead (default
	// DefaultMaxImageBytes, DefaultMaxImagesBytes).
	MaxImageBytes  int
	MaxImagesBytes int
	// MaxPendingImageBytes caps the image data (data URLs) held by all messages waiting for their
	// answer; a message whose images would pass it is answered with a note instead of them.
	// Default DefaultMaxPendingImageBytes.
	MaxPendingImageBytes int
	// WorkDir is the working directory of codex's threads: files uploaded in a chat are saved in
	// that chat's folder under it (<WorkDir>/.chats/<chat>/uploads). Default: the daemon's own.
	WorkDir string
	// MaxUploadBytes caps one file a message names by platform-pending: URI, MaxUploadsBytes all
	// of one message's, and MaxAttachments how many of them are taken; the platform's own limits
	// (GET /uploads/limits) apply when lower. A file past a limit is not fetched and the chat is
	// told. Defaults DefaultMaxUploadBytes, DefaultMaxUploadsBytes, DefaultMaxAttachments.
	MaxUploadBytes  int64
	MaxUploadsBytes int64
	MaxAttachments  int
	// Secrets is the daemon's one secret set (package secretset). The inbox adds what it learns
	// (every workspace token in use, platform_inbound_secret from register and heartbeat, every
	// value of the workspace's secrets it reads), and reads it everywhere text or files leave: a
	// file the agent sends that holds any of them is refused (sendfiles.go), and every reply,
	// note, progress line, current_task and log entry is redacted. Nil: a set of the inbox's own.
	Secrets *secretset.Set
	// UploadTimeout bounds the download of one file, however steadily it trickles (default
	// DefaultUploadTimeout).
	UploadTimeout time.Duration
	// MaxReplyBytes caps one reply sent to the platform, the same way.
	MaxReplyBytes int
	// MaxUnacked bounds messages received but not yet behind the durable position; polling pauses
	// at the bound (back-pressure) so memory stays bounded when one reply cannot be delivered.
	MaxUnacked int
	// RecentIDs is how many finished activity ids are remembered for de-duplication.
	RecentIDs int
	// DrainTimeout is how long Run lets in-flight turns and deliveries finish after ctx is done.
	DrainTimeout time.Duration
	// RetryInitial and RetryMax shape the exponential backoff (with jitter) of reply delivery,
	// register and poll errors, and of messages the pool answered busy.
	RetryInitial time.Duration
	RetryMax     time.Duration
	// BusyRetryFor bounds how long a message is tried again while the supervisor answers busy
	// (every slot taken, too many chats waiting for one, the chat's queue full, codex
	// overloaded), counted from its first try. Meanwhile its row stays unacknowledged (the
	// platform keeps it; a restart answers it) and later messages of the same chat wait behind
	// it; after the bound it is answered with the busy text. The supervisor's pool is the only
	// limit on concurrent turns: the inbox runs every chat with work at once and lets the pool
	// say busy.
	BusyRetryFor time.Duration
	// SinceSecs is the look-back window of a poll without a cursor.
	SinceSecs int
	// PeerTurnTimeout is an A2A reply's X-Timeout: how long the platform may hold the send for a
	// push peer's turn. The send itself waits that long and a grace, unlike other platform calls
	// (RequestTimeout). Default DefaultPeerTurnTimeout.
	PeerTurnTimeout time.Duration
	// PeerExchanges caps automatic exchanges in a row with one peer agent (see pingpong.go):
	// past it the peer's messages are not answered until this workspace's canvas user writes
	// or the peer has been quiet for PeerQuietReset. Defaults DefaultPeerExchanges and
	// DefaultPeerQuietReset.
	PeerExchanges  int
	PeerQuietReset time.Duration
	// OnPoll, when set, is called after each activity poll with its duration and error (nil on
	// success; a 410 for an unknown cursor counts as an error here). The daemon records poll
	// latency with it. It must return promptly.
	OnPoll func(d time.Duration, err error)
}

// withDefaults returns cfg with zero fields set to their defaults.
func (cfg Config) withDefaults() Config {
	if cfg.Secrets == nil {
		cfg.Secrets = secretset.New()
	}
	setDur := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	setInt := func(n *int, v int) {
		if *n <= 0 {
			*n = v
		}
	}
	setDur(&cfg.PollInterval, DefaultPollInterval)
	setDur(&cfg.SafetyPollInterval, DefaultSafetyPollInterval)
	setDur(&cfg.HeartbeatInterval, DefaultHeartbeatInterval)
	setDur(&cfg.RequestTimeout, DefaultRequestTimeout)
	setDur(&cfg.DrainTimeout, DefaultDrainTimeout)
	setDur(&cfg.RetryInitial, DefaultRetryInitial)
	setDur(&cfg.RetryMax, DefaultRetryMax)
	setDur(&cfg.BusyRetryFor, DefaultBusyRetryFor)
	setDur(&cfg.ParkLimit, DefaultParkLimit)
	setDur(&cfg.UploadTimeout, DefaultUploadTimeout)
	if cfg.MaxUploadBytes <= 0 {
		cfg.MaxUploadBytes = DefaultMaxUploadBytes
	}
	if cfg.MaxUploadsBytes <= 0 {
		cfg.MaxUploadsBytes = DefaultMaxUploadsBytes
	}
	setInt(&cfg.MaxAttachments, DefaultMaxAttachments)
	if cfg.WorkDir == "" {
		if wd, err := os.Getwd(); err == nil {
			cfg.WorkDir = wd
		}
	}
	setDur(&cfg.PeerTurnTimeout, platform.DefaultPeerTurnTimeout)
	setDur(&cfg.PeerQuietReset, DefaultPeerQuietReset)
	setInt(&cfg.PeerExchanges, DefaultPeerExchanges)
	if cfg.MaxPollBytes <= 0 {
		cfg.MaxPollBytes = DefaultMaxPollBytes
	}
	if cfg.MaxRowBytes <= 0 {
		cfg.MaxRowBytes = DefaultMaxRowBytes
	}
	cfg.MaxRowBytes = min(cfg.MaxRowBytes, cfg.MaxPollBytes)
	setInt(&cfg.MaxTextBytes, chat.DefaultMaxTextBytes)
	setInt(&cfg.MaxImageBytes, DefaultMaxImageBytes)
	setInt(&cfg.MaxImagesBytes, DefaultMaxImagesBytes)
	setInt(&cfg.MaxPendingImageBytes, DefaultMaxPendingImageBytes)
	setInt(&cfg.MaxReplyBytes, DefaultMaxReplyBytes)
	setInt(&cfg.MaxUnacked, DefaultMaxUnacked)
	setInt(&cfg.WedgedAfter, DefaultWedgedAfter)
	setInt(&cfg.RecentIDs, DefaultRecentIDs)
	setInt(&cfg.SinceSecs, DefaultSinceSecs)
	cfg.MaxTextBytes = max(cfg.MaxTextBytes, minTextCap)
	cfg.MaxReplyBytes = max(cfg.MaxReplyBytes, minTextCap)
	// The de-dup memory must outlive the unacked window, or an id could be forgotten while it is
	// still ahead of the durable position.
	cfg.RecentIDs = max(cfg.RecentIDs, 2*cfg.MaxUnacked)
	if cfg.AgentName == "" {
		cfg.AgentName = DefaultAgentName
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return cfg
}

// validate checks what New needs; the messages name the environment variable to fix.
func (cfg Config) validate() error {
	if _, err := platform.ParseURL(cfg.PlatformURL); err != nil {
		return err
	}
	if !validWorkspaceID(cfg.WorkspaceID) {
		return fmt.Errorf("workspace id %q is invalid: MOLECULE_WORKSPACE_ID must match %s", cfg.WorkspaceID, workspaceIDPattern)
	}
	if cfg.Token == "" {
		return errors.New("no workspace token: set MOLECULE_WORKSPACE_TOKEN or write <configs>/.auth_token (or the file MOLECULE_WORKSPACE_TOKEN_FILE names)")
	}
	if strings.ContainsAny(cfg.Token, "\r\n") {
		return errors.New("workspace token contains a line break")
	}
	if strings.ContainsAny(cfg.OrgID, "\r\n") {
		return errors.New("MOLECULE_ORG_ID contains a line break")
	}
	if cfg.StateDir == "" {
		return errors.New("no state directory: set CODEX_CHANNEL_MOLECULE_STATE_DIR or HOME")
	}
	if cfg.Answerer == nil {
		return errors.New("no answerer configured")
	}
	return nil
}

// TokenFileName is the workspace token's file in the configs directory (the client's).
const TokenFileName = platform.TokenFileName

// Environment variables of the Molecule settings, canonical name first, then its aliases in
// the order they are tried (the runtime's contracts/credentials.contract.json).
var (
	PlatformURLEnv = []string{"MOLECULE_API_URL", "MOLECULE_URL", "PLATFORM_URL", "MOLECULE_PLATFORM_URL"}
	WorkspaceIDEnv = []string{"MOLECULE_WORKSPACE_ID", "WORKSPACE_ID"}
)

// FirstEnv returns the first of names set (non-blank) in the environment, and its value.
func FirstEnv(getenv func(string) string, names []string) (name, value string) {
	for _, n := range names {
		if v := strings.TrimSpace(getenv(n)); v != "" {
			return n, v
		}
	}
	return "", ""
}

// ConfigFromEnv reads the Molecule settings from the environment the Molecule runtime reads
// (contracts/credentials.contract.json): the platform URL from MOLECULE_API_URL, else
// MOLECULE_URL, PLATFORM_URL, MOLECULE_PLATFORM_URL (the first one set wins); the workspace from
// MOLECULE_WORKSPACE_ID, else WORKSPACE_ID; the org from MOLECULE_ORG_ID; the token from the
// file MOLECULE_WORKSPACE_TOKEN_FILE names, else <configs>/.auth_token, and else from
// MOLECULE_WORKSPACE_TOKEN (the file first: the platform writes and rotates it there; a file the
// variable names that is missing is an error naming it when MOLECULE_WORKSPACE_TOKEN is not set
// either); the configs directory is CONFIGS_DIR, else /configs
// when it exists and is writable, else $HOME/.molecule-workspace (configs_dir.py). The state
// directory is CODEX_CHANNEL_MOLECULE_STATE_DIR (default $HOME/.codex-channel-molecule).
// getenv is usually os.Getenv. Answerer and Logger are left for the caller.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	env := func(k string) string { return strings.TrimSpace(getenv(k)) }
	urlVar, platformURL := FirstEnv(getenv, PlatformURLEnv)
	wsVar, workspaceID := FirstEnv(getenv, WorkspaceIDEnv)
	cfg := Config{
		PlatformURL: platformURL,
		WorkspaceID: workspaceID,
		OrgID:       env("MOLECULE_ORG_ID"),
		StateDir:    env("CODEX_CHANNEL_MOLECULE_STATE_DIR"),
	}
	if _, err := platform.ParseURL(cfg.PlatformURL); err != nil {
		if urlVar != "" {
			return Config{}, fmt.Errorf("%s: %w", urlVar, err)
		}
		return Config{}, err
	}
	if cfg.WorkspaceID == "" {
		return Config{}, errors.New("MOLECULE_WORKSPACE_ID (or WORKSPACE_ID) is not set")
	}
	if !validWorkspaceID(cfg.WorkspaceID) {
		return Config{}, fmt.Errorf("%s %q is invalid: it must match %s", wsVar, cfg.WorkspaceID, workspaceIDPattern)
	}
	if strings.ContainsAny(cfg.OrgID, "\r\n") {
		return Config{}, errors.New("MOLECULE_ORG_ID contains a line break")
	}
	cfg.TokenFile = filepath.Join(ConfigsDir(getenv), TokenFileName)
	named := env(TokenFileEnv)
	if named != "" {
		cfg.TokenFile = named
	}
	token, err := tokenFromEnv(env, cfg.TokenFile, named != "")
	if err != nil {
		return Config{}, err
	}
	cfg.Token = token
	if cfg.StateDir == "" {
		home := env("HOME")
		if home == "" {
			return Config{}, errors.New("neither CODEX_CHANNEL_MOLECULE_STATE_DIR nor HOME is set")
		}
		cfg.StateDir = filepath.Join(home, ".codex-channel-molecule")
	}
	return cfg, nil
}

// ConfigsDir is the Molecule runtime's configs directory (configs_dir.py): CONFIGS_DIR when
// set, else /configs when it exists and is writable (inside a workspace container), else
// $HOME/.molecule-workspace. Nothing is created.
func ConfigsDir(getenv func(string) string) string {
	if d := strings.TrimSpace(getenv("CONFIGS_DIR")); d != "" {
		return d
	}
	if fi, err := os.Stat(containerConfigsDir); err == nil && fi.IsDir() && unix.Access(containerConfigsDir, unix.W_OK) == nil {
		return containerConfigsDir
	}
	return filepath.Join(strings.TrimSpace(getenv("HOME")), ".molecule-workspace")
}

// containerConfigsDir is the configs directory the platform mounts into workspace containers.
const containerConfigsDir = "/configs"

// TokenFileEnv names the workspace token's file when set (the runtime sets it): it replaces
// <configs>/.auth_token, and is read again on rotation as that file is.
const TokenFileEnv = "MOLECULE_WORKSPACE_TOKEN_FILE"

// tokenFromEnv prefers the token file, as the runtime does (the platform writes and rotates it;
// a token register issued was saved there), and falls back to MOLECULE_WORKSPACE_TOKEN. named
// says TokenFileEnv named the file. Errors name the file but never its content.
func tokenFromEnv(env func(string) string, path string, named bool) (string, error) {
	t, err := platform.ReadTokenFile(path)
	if err != nil {
		return "", err
	}
	if t != "" {
		return t, nil
	}
	if t := env("MOLECULE_WORKSPACE_TOKEN"); t != "" {
		if strings.ContainsAny(t, "\r\n") {
			return "", errors.New("MOLECULE_WORKSPACE_TOKEN contains a line break")
		}
		return t, nil
	}
	if named {
		return "", fmt.Errorf("no workspace token: %s names %s, which does not exist or is empty, and MOLECULE_WORKSPACE_TOKEN is not set", TokenFileEnv, path)
	}
	return "", fmt.Errorf("no workspace token: MOLECULE_WORKSPACE_TOKEN is not set and %s does not exist or is empty", path)
}
