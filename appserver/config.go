package appserver

import (
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/childproc"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// Defaults for zero Config fields.
const (
	DefaultHandshakeTimeout = 30 * time.Second
	DefaultCloseGrace       = childproc.DefaultCloseGrace
	DefaultStderrTailBytes  = childproc.DefaultStderrTailBytes
	DefaultMaxLineBytes     = 64 << 20
	DefaultWriteTimeout     = 30 * time.Second
	DefaultInterruptGrace   = 5 * time.Second
)

// Config describes one child.
type Config struct {
	// Bin is the native codex binary (see ResolveBinary). Required.
	Bin string
	// Args are the arguments after the -c overrides; nil means ["app-server"].
	Args []string
	// ConfigOverrides are "key=value" codex config overrides, each passed as "-c key=value".
	ConfigOverrides []string
	// Env is the child's environment; nil means os.Environ(). HOME is passed through untouched.
	Env []string
	// CodexHome, when set, replaces CODEX_HOME in Env.
	CodexHome string
	// Dir is the child's working directory; empty means the daemon's.
	Dir string
	// Credential, when set, runs the child as that user and group (the daemon needs the right
	// to: root, or CAP_SETUID/CAP_SETGID). A separate user keeps the commands codex runs for the
	// model away from the daemon's files and process. Nil runs it as the daemon's user.
	Credential *syscall.Credential
	// ClientInfo identifies the daemon in initialize. A zero Name becomes "codex-warm".
	ClientInfo protocol.ClientInfo
	// OptOutNotifications are notification methods the server should not send (e.g. deltas).
	OptOutNotifications []string
	// HandshakeTimeout bounds initialize. Default DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// CloseGrace is the wait of each Close step (stdin EOF, SIGTERM) before the next one, and
	// the wait for the child's last output once it exited. Default DefaultCloseGrace.
	CloseGrace time.Duration
	// StderrTailBytes is how much of the child's stderr is kept for error messages. Zero means
	// DefaultStderrTailBytes (childproc applies it).
	StderrTailBytes int
	// MaxLineBytes is the longest line accepted from the child. A longer line is a protocol
	// error that breaks the connection (ErrLineTooLong); the child has to be retired. Default
	// DefaultMaxLineBytes.
	MaxLineBytes int
	// WriteTimeout bounds one write to the child's stdin. A child that does not read its stdin
	// for this long is treated as broken. Default DefaultWriteTimeout.
	WriteTimeout time.Duration
	// Overload bounds the retries of requests codex refused with -32001 "Server overloaded;
	// retry later." (ErrOverloaded). Zero fields take the defaults (see OverloadRetry).
	Overload OverloadRetry
	// OnOverloadRetry, if set, is called with the request's method each time a refused request
	// is about to be retried. It may be called from several goroutines at once and must not
	// block.
	OnOverloadRetry func(method string)
	// Policy answers the server's approval and input requests. The zero value declines.
	Policy Policy
	// Tokens, when set, makes the daemon the holder of the child's ChatGPT login: the child
	// runs with an ephemeral credential store (it never reads auth.json nor calls the token
	// endpoint), is logged in with Tokens.Login after initialize, gets every new token pushed,
	// and its refresh requests are answered from Tokens. Nil leaves the login to codex.
	Tokens TokenSource
	// TokenPushWait bounds how long a new token waits for a moment when none of the child's
	// turns runs, before it is handed over beside them (pushTokens). Zero waits for such a
	// moment however long it takes: right for a child of one chat, whose turns end; a child
	// hosting several chats' threads may never be without one.
	TokenPushWait time.Duration
	// DynamicTools are client-defined tools offered on every thread started (tools.go).
	DynamicTools []protocol.DynamicToolSpec
	// WarmUpURL, when set, is the base URL of the daemon's canned model responder on loopback
	// (package cannedmodel): the child defines WarmUpProvider pointing at it, for WarmUp.
	WarmUpURL string
	// Logger receives the client's logs; nil means zap.NewNop().
	Logger *zap.Logger
	// Fork, when set, runs the fork of the child (see childproc.ProcessConfig.Fork).
	Fork func(start func() error) error
}

func (cfg Config) withDefaults() Config {
	if cfg.Args == nil {
		cfg.Args = []string{"app-server"}
	}
	if cfg.ClientInfo.Name == "" {
		cfg.ClientInfo = protocol.ClientInfo{Name: "codex-warm", Title: "codex-warm daemon", Version: "dev"}
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.CloseGrace <= 0 {
		cfg.CloseGrace = DefaultCloseGrace
	}
	if cfg.MaxLineBytes <= 0 {
		cfg.MaxLineBytes = DefaultMaxLineBytes
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	cfg.Overload = cfg.Overload.withDefaults()
	return cfg
}
