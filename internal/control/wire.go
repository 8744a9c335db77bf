package control

import (
	"time"

	"github.com/molecule-ai/codex-warm/bridge/local"
	"github.com/molecule-ai/codex-warm/bridge/molecule"
	"github.com/molecule-ai/codex-warm/internal/codexauth"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// SocketName is the control socket's file in the daemon's state directory.
const SocketName = "supervisor.sock"

// The verbs the daemon serves, as registered on a Server and asked by a Client.
const (
	VerbStatus = "GET /v1/status"
	VerbReload = "POST /v1/reload"
	VerbStop   = "POST /v1/stop"
	VerbLive   = "GET /v1/healthz"
	VerbReady  = "GET /v1/readyz"
)

// DaemonInfo describes the running daemon in a status answer.
type DaemonInfo struct {
	PID     int       `json:"pid"`
	Version string    `json:"version"`
	Started time.Time `json:"started"`
	Inbox   string    `json:"inbox"`
	Listen  string    `json:"listen,omitempty"`
	// MetricsListen is the bound address of the metrics listener (--metrics-listen); empty when
	// off.
	MetricsListen string `json:"metrics_listen,omitempty"`
	CodexBin      string `json:"codex_bin"`
	StateDir      string `json:"state_dir"`
	// Goroutines and the memory figures are the daemon's own, without its codex children, so operators
	// (and the soak test) can see that it returns to its baseline after load.
	Goroutines int    `json:"goroutines"`
	RSSBytes   int64  `json:"rss_bytes"`
	PSSBytes   int64  `json:"pss_bytes"`
	USSBytes   int64  `json:"uss_bytes"`
	HeapBytes  uint64 `json:"heap_bytes"`
	// Executable is the file a reload runs; Reloads counts the reloads since Started, the
	// start of the daemon's first image; LastReload is the last attempt, nil before any.
	Executable string      `json:"executable,omitempty"`
	Reloads    int         `json:"reloads"`
	LastReload *ReloadInfo `json:"last_reload,omitempty"`
	// CodexVersion is what `codex --version` reported at start-up.
	CodexVersion string `json:"codex_version,omitempty"`
	// CodexAuth is codex's login state as last checked (at start-up, and again when a refused
	// message finds the answer stale).
	CodexAuth *CodexAuth `json:"codex_auth,omitempty"`
}

// ReloadInfo is the last reload in a status answer.
type ReloadInfo struct {
	// Attempt numbers the reload attempts of this daemon (pid) since it first started.
	Attempt int       `json:"attempt"`
	Trigger string    `json:"trigger"`
	At      time.Time `json:"at"`
	// Outcome is "running", "starting" (the new image took over and does not serve yet), "ok",
	// "refused" (nothing was stopped, or all was resumed before any exec) or "failed" (the exec
	// failed; the old image serves on).
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
	From    string `json:"from_version,omitempty"`
	To      string `json:"to_version,omitempty"`
	// Children is how many warm children were handed over; Turns how many of them were in the
	// middle of a turn, and Callers how many local inbox callers' connections crossed.
	Children int `json:"children"`
	Turns    int `json:"turns"`
	Callers  int `json:"callers"`
}

// CodexAuth.State values.
const (
	CodexLoggedIn    = "ok"
	CodexNotLoggedIn = "not_logged_in"
	CodexAuthUnknown = "unknown"
)

// CodexAuth is what codex said about its credentials (account/read).
type CodexAuth struct {
	// State is CodexLoggedIn, CodexNotLoggedIn (messages are refused with the login hint) or
	// CodexAuthUnknown (the check failed; messages are served).
	State string `json:"state"`
	// Account is the kind of credentials codex has ("apiKey", "chatgpt", ...), "" for none.
	Account string `json:"account,omitempty"`
	// RequiresOpenAIAuth is false when the model provider needs no OpenAI login.
	RequiresOpenAIAuth bool      `json:"requires_openai_auth"`
	Checked            time.Time `json:"checked"`
	// Detail says why the state is not CodexLoggedIn.
	Detail string `json:"detail,omitempty"`
	// Tokens is the ChatGPT login the daemon holds for its children (nil: codex holds its own
	// login): its state, expiry and last refresh, never a token.
	Tokens *codexauth.Status `json:"chatgpt_tokens,omitempty"`
	// LoginOwner is who renews the ChatGPT login: codexauth.OwnerPlatform, OwnerDaemon or
	// OwnerChild (each codex child holds its own).
	LoginOwner string `json:"login_owner,omitempty"`
}

// StatusDoc is the answer to VerbStatus.
type StatusDoc struct {
	Daemon   DaemonInfo          `json:"daemon"`
	Snapshot supervisor.Snapshot `json:"snapshot"`
	// Bridge is the Molecule inbox's counters; nil on the local inbox. Typed, not decoded into
	// a map, so that the text status can show them too.
	Bridge *molecule.Stats `json:"bridge,omitempty"`
	// LocalFiles counts the files the local inbox's replies carried and refused; nil on the
	// Molecule inbox (Bridge counts them there).
	LocalFiles *local.FileStats `json:"local_files,omitempty"`
	// Models is each chat's model and effort (/model, /effort); nil when not known.
	Models *ChatModels `json:"models,omitempty"`
	// NotReady are the causes parts give for the daemon not being ready, and Sections the lines
	// they add: a part adds them here and Render prints them, with no change to Render.
	NotReady []NotReadyCause `json:"not_ready,omitempty"`
	Sections []StatusSection `json:"sections,omitempty"`
}

// NotReadyCause is why a part holds the daemon not ready; Render prints it as a warning below
// the header.
type NotReadyCause struct {
	Part string `json:"part"` // the part that says so, as readiness names its check ("model")
	Text string `json:"text"`
}

// StatusSection is one line a part adds to the status table, below the inbox's counters: its
// title, then its rows.
type StatusSection struct {
	Title string      `json:"title"`
	Rows  []StatusRow `json:"rows,omitempty"`
}

// StatusRow is one figure of a StatusSection, printed as "label value".
type StatusRow struct {
	Label string `json:"label"`
	Value string `json:"value"`
}

// ReloadAnswer is the answer to VerbReload. A refusal has the shape of every error answer
// ({"error": …}), so it decodes into Error.
type ReloadAnswer struct {
	// Attempt is the reload's number in status (daemon.last_reload.attempt); 0 when refused.
	Attempt int    `json:"attempt,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Empty is the request of a verb that takes none, and the answer of one that says nothing but
// its status.
type Empty struct{}
