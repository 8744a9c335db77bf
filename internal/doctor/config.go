package doctor

import (
	"context"
	"syscall"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/codexauth"
	"github.com/molecule-ai/codex-warm/internal/control"
)

// Config is the configuration `supervisor run` would use, as the checks see it.
type Config struct {
	// Inbox is "local" or "molecule".
	Inbox    string
	StateDir string
	// Listen is the local inbox's address; InboxTokenSet says a token guards it.
	Listen        string
	InboxTokenSet bool
	// CodexConfig are the -c overrides the children get.
	CodexConfig []string
	// Cwd is --cwd as given (config/read asks for it); WorkDir the threads' working directory.
	Cwd     string
	WorkDir string
	// ChildUser is --child-user, Credential its resolved credential (nil: none, or it could
	// not be resolved).
	ChildUser  string
	Credential *syscall.Credential
	// Env is the environment codex children get: the daemon's secrets removed, HOME of
	// ChildUser.
	Env []string
	// Getenv reads the daemon's own environment.
	Getenv func(string) string

	ChatGPTTokens        string // --chatgpt-tokens
	ChatGPTPlatformCheck time.Duration
	TokenRefreshAhead    time.Duration
	PlatformTimeout      time.Duration
	// EventStream is --event-stream: whether run subscribes to the Molecule event stream.
	EventStream bool

	MaxChildren int
	// MemoryBudget is --memory-budget in bytes: 0 the default (a fraction of MemAvailable),
	// negative off; MemoryBudgetErr says why it could not be read.
	MemoryBudget    int64
	MemoryBudgetErr error

	// NoCodexHint says what to do when no codex is found.
	NoCodexHint string

	Steps Steps
}

// Steps are the daemon's own start-up steps the checks repeat.
type Steps struct {
	// FindCodex locates the codex binary as run would; an error wrapping appserver.ErrNoCodex
	// means none was given or found.
	FindCodex func() (Codex, error)
	// ProbeCodex starts a codex app-server from tmpl, calls also (if not nil) with it, and
	// asks it for its login.
	ProbeCodex func(ctx context.Context, tmpl appserver.Config, also func(context.Context, *appserver.Client)) control.CodexAuth
	// PlanLogin decides who owns the ChatGPT login of codexHome.
	PlanLogin func(ctx context.Context, codexHome string) (LoginPlan, error)
	// ChildAccess tries, as the child user, what a codex child does: run bin, write in
	// codexHome and workDir.
	ChildAccess func(ctx context.Context, bin, codexHome, workDir string) []AccessProblem
}

// Codex is the codex binary the daemon would run and how it was found.
type Codex struct {
	// Bin is the native binary.
	Bin string
	// Given is what pointed at it (the --codex-bin / CODEX_BIN value, the file beside the
	// supervisor executable, or the PATH entry); it differs from Bin for the npm node wrapper.
	Given string
	// From says where Given came from: "--codex-bin", "CODEX_BIN", "beside supervisor" or
	// "PATH".
	From string
}

// LoginPlan is who owns the ChatGPT login (a codexauth.Owner* value), why, and where a login
// the platform owns is read from.
type LoginPlan struct {
	Owner   string
	Why     string
	Sources []codexauth.Source
}

// AccessProblem is something the child user cannot do; Fatal when it fails every message.
type AccessProblem struct {
	What  string
	Fix   string
	Fatal bool
}

// Timeouts of the checks that start codex, as run's own.
const (
	versionTimeout    = 10 * time.Second
	loginCheckTimeout = 30 * time.Second
)
