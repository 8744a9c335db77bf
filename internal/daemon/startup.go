package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/childproc"
	"github.com/molecule-ai/codex-warm/internal/codexauth"
	"github.com/molecule-ai/codex-warm/internal/codexversion"
	"github.com/molecule-ai/codex-warm/internal/control"
)

// Bounds of the start-up checks of codex.
const (
	// versionTimeout bounds `codex --version`.
	versionTimeout = 10 * time.Second
	// loginCheckTimeout bounds one login check: spawn, initialize, account/read.
	loginCheckTimeout = 30 * time.Second
	// loginRecheckEvery is how long a "not logged in" result stands before a message makes the
	// daemon ask codex again, so an operator's `codex login` takes effect without a restart.
	loginRecheckEvery = 5 * time.Second
)

// preflight runs the start-up checks that need the resolved codex binary and the locked state
// directory, before any child is started: the state dir's mode, that bin is the codex CLI
// (an error otherwise), and whether codex can authenticate. env is the children's environment.
// It sets d.login, which refuses messages while codex is not logged in. cred is the children's
// user (nil: the daemon's): the login that counts is theirs.
func (d *daemon) preflight(ctx context.Context, bin string, env []string, cred *syscall.Credential, tokens *codexauth.Manager) error {
	if err := warnStateDirMode(d.cfg.StateDir, d.log); err != nil {
		return err
	}
	vctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	v, err := appserver.Version(vctx, bin, env)
	if err != nil && d.givenBack {
		// The next binary gave the daemon back because codex broke after the preflight: this
		// image's children run, and it serves them rather than end them all.
		d.log.Error("codex fails its check; serving on with the children handed back", zap.String("codex_bin", bin), zap.Error(err))
	} else if err != nil {
		return fmt.Errorf("check codex: %w", err)
	}
	d.info.CodexVersion = v
	if where, err := codexversion.Range(v); err != nil || where != 0 {
		detail, fix := codexversion.Risk(v, where)
		d.log.Warn(detail, zap.String("codex_bin", bin), zap.String("fix", fix), zap.Error(err))
	}
	tmpl := appserver.Config{Bin: bin, Env: env, Credential: cred, ConfigOverrides: d.cfg.CodexConfig,
		HandshakeTimeout: loginCheckTimeout, Logger: d.log.With(zap.String("purpose", "login check"))}
	if tokens != nil {
		// A nil *Manager in the interface would not be nil.
		tmpl.Tokens = tokens
	}
	d.login = newLoginGate(func(ctx context.Context) control.CodexAuth { return checkLogin(ctx, tmpl) }, loginRecheckEvery)
	d.login.tokens = tokens
	// The first check's child also says which config keys some layer sets, so the lean
	// settings never override the operator's.
	var origins map[string]json.RawMessage
	originsErr := errors.New("codex did not start")
	d.codexModels.err = originsErr
	a := d.login.checkWith(ctx, func(ctx context.Context) control.CodexAuth {
		return probeCodex(ctx, tmpl, func(ctx context.Context, c *appserver.Client) {
			res, err := c.ReadConfig(ctx, d.cfg.Cwd)
			origins, originsErr = res.Origins, err
			d.codexModels = readCodexModels(ctx, c, res, err)
		})
	})
	if d.cfg.LeanChildren {
		d.leanOverrides = leanOverrides(origins, originsErr, d.log)
	}
	codexHome := appserver.EffectiveCodexHome(env)
	switch a.State {
	case control.CodexNotLoggedIn:
		d.log.Error("codex is not logged in and its model provider needs an OpenAI login: every message is answered with "+
			"a `codex login` hint until an operator runs `codex login` as the daemon's user with the same CODEX_HOME",
			zap.String("codex_bin", bin), zap.String("codex_home", codexHome), zap.String("detail", a.Detail))
	case control.CodexAuthUnknown:
		d.log.Warn("could not check whether codex is logged in; messages are served anyway",
			zap.String("codex_bin", bin), zap.String("codex_home", codexHome), zap.String("detail", a.Detail))
	default:
		d.log.Info("codex checked", zap.String("codex_version", v), zap.String("codex_home", codexHome),
			zap.String("account", a.Account), zap.Bool("requires_openai_auth", a.RequiresOpenAIAuth))
	}
	return nil
}

// addCodexStatus puts the current login state into a status document.
func (d *daemon) addCodexStatus(doc *control.StatusDoc) {
	if d.login != nil {
		a := d.login.current()
		a.LoginOwner = d.loginOwner
		doc.Daemon.CodexAuth = &a
	}
}

// openTokens takes the ChatGPT login into the daemon's hands (see package codexauth) as plan
// says: a login the platform owns is read from its sources and never refreshed; the daemon's
// own (CODEX_HOME/auth.json) is refreshed once for every child. It returns nil when each child
// holds its login (--chatgpt-tokens off, or not a ChatGPT login).
func openTokens(cfg Config, plan loginPlan, codexHome string, getenv func(string) string, onRefresh func(string),
	carried codexauth.Carried, log *zap.Logger) (*codexauth.Manager, error) {
	if plan.owner == codexauth.OwnerChild {
		return nil, nil
	}
	m, kind, err := codexauth.Open(codexauth.Config{CodexHome: codexHome, TokenURL: codexauth.TokenURLFrom(getenv),
		RefreshAhead: cfg.TokenRefreshAhead, Platform: plan.sources, PlatformCheck: cfg.ChatGPTPlatformCheck,
		OnRefresh: onRefresh, Carried: carried, Logger: log, LockHolder: lockHolder})
	if err != nil {
		return nil, err
	}
	if m == nil {
		log.Info("codex keeps its own login (not a ChatGPT login)", zap.String("kind", string(kind)), zap.String("codex_home", codexHome))
		return nil, nil
	}
	st := m.Status()
	if st.Owner == codexauth.OwnerPlatform {
		log.Info("the platform owns the ChatGPT login: the daemon reads it, hands it to every codex child and never refreshes it",
			zap.String("why", plan.why), zap.String("source", st.Source), zap.Time("expires", st.Expires), zap.String("plan", st.PlanType),
			zap.Duration("platform_check", cfg.ChatGPTPlatformCheck))
		return m, nil
	}
	log.Info("the daemon holds the ChatGPT login for every codex child: one refresher, tokens pushed to each child",
		zap.String("why", plan.why), zap.String("codex_home", codexHome), zap.Time("expires", st.Expires), zap.String("plan", st.PlanType))
	return m, nil
}

// checkLogin starts a codex app-server like a child and asks it for its account (account/read).
// "Not logged in" is codex's own rule: no account while its model provider requires OpenAI
// auth. A provider configured with its own key, or a local one, does not, and `codex login
// status` cannot tell that apart (it says "Not logged in" either way).
func checkLogin(ctx context.Context, tmpl appserver.Config) control.CodexAuth {
	return probeCodex(ctx, tmpl, nil)
}

// probeCodex is checkLogin that, when also is not nil, calls it with the running app-server
// before closing it, so `supervisor doctor` asks its other questions of the same process.
func probeCodex(ctx context.Context, tmpl appserver.Config, also func(context.Context, *appserver.Client)) control.CodexAuth {
	ctx, cancel := context.WithTimeout(ctx, loginCheckTimeout)
	defer cancel()
	a := control.CodexAuth{State: control.CodexAuthUnknown, Checked: time.Now().UTC()}
	c, err := appserver.Start(ctx, tmpl)
	if err != nil {
		a.Detail = err.Error()
		return a
	}
	defer c.Close()
	if also != nil {
		also(ctx, c)
	}
	res, err := c.ReadAccount(ctx)
	if err != nil {
		a.Detail = err.Error()
		return a
	}
	a.RequiresOpenAIAuth = res.RequiresOpenaiAuth
	if res.Account != nil {
		a.Account = res.Account.Type
	}
	if res.Account == nil && res.RequiresOpenaiAuth {
		a.State, a.Detail = control.CodexNotLoggedIn, "account/read: no account, and the model provider requires OpenAI auth"
		return a
	}
	a.State = control.CodexLoggedIn
	return a
}

// loginGate holds codex's login state and refuses messages while it is "not logged in", so they
// are answered at once with the login hint instead of running turns that cannot succeed. A
// message that finds the state older than every asks codex again (one check at a time; the
// others use the state at hand), so logging codex in needs no daemon restart.
type loginGate struct {
	probe func(ctx context.Context) control.CodexAuth
	every time.Duration
	// tokens is the ChatGPT login the daemon holds, when it holds one: a login it found gone
	// refuses messages at once, without a child meeting a 401 first.
	tokens *codexauth.Manager

	checking sync.Mutex // held by the one check in flight

	mu    sync.Mutex
	state control.CodexAuth
}

func newLoginGate(probe func(ctx context.Context) control.CodexAuth, every time.Duration) *loginGate {
	return &loginGate{probe: probe, every: every, state: control.CodexAuth{State: control.CodexAuthUnknown}}
}

// check asks codex now and records the answer.
func (g *loginGate) check(ctx context.Context) control.CodexAuth { return g.checkWith(ctx, g.probe) }

// checkWith is check asking with probe instead of the gate's own.
func (g *loginGate) checkWith(ctx context.Context, probe func(ctx context.Context) control.CodexAuth) control.CodexAuth {
	a := probe(ctx)
	g.mu.Lock()
	g.state = a
	g.mu.Unlock()
	return a
}

func (g *loginGate) current() control.CodexAuth {
	g.mu.Lock()
	a := g.state
	g.mu.Unlock()
	if g.tokens != nil {
		st := g.tokens.Status()
		a.Tokens, a.Account = &st, "chatgpt"
		// The daemon holds the login, so its state is the login's; account/read may fail
		// offline while turns work.
		a.State, a.Detail = control.CodexLoggedIn, ""
		if st.State == codexauth.StateGone || st.State == codexauth.StateUncertain {
			a.State, a.Detail = control.CodexNotLoggedIn, st.LastError
		}
	}
	return a
}

// admit is supervisor.Config.Admit: an *appserver.AuthError while codex is not logged in.
func (g *loginGate) admit(ctx context.Context, _ string) error {
	if g.tokens != nil {
		if err := g.tokens.Usable(); err != nil {
			return &appserver.AuthError{Msg: err.Error(), Err: err}
		}
	}
	a := g.refresh(ctx, func(a control.CodexAuth) bool { return a.State == control.CodexNotLoggedIn })
	if a.State == control.CodexNotLoggedIn {
		return &appserver.AuthError{Msg: a.Detail}
	}
	return nil
}

// refresh returns the login state, asking codex again first when stale says the state at hand
// is worth checking and it is older than every (and no other check is in flight).
func (g *loginGate) refresh(ctx context.Context, stale func(control.CodexAuth) bool) control.CodexAuth {
	a := g.current()
	if stale(a) && time.Since(a.Checked) >= g.every && g.checking.TryLock() {
		a = g.check(ctx)
		g.checking.Unlock()
	}
	return a
}

// warnStateDirMode logs a warning when other users can read, write or enter the state directory:
// it holds the chats' thread ids, the inbox position and the control socket. An operator may have
// chosen that (a shared group), so it is not fatal.
func warnStateDirMode(dir string, log *zap.Logger) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("state dir %s: %w", dir, err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		log.Warn("state directory is accessible to other users; it holds chat thread ids and the control socket (chmod 700 it)",
			zap.String("dir", dir), zap.String("mode", fmt.Sprintf("%04o", perm)))
	}
	return nil
}

// lockHolder names the process holding a flock on a file, for the login's lock waits: looking
// at other processes is childproc's one /proc reader's job.
func lockHolder(dev, ino uint64) string {
	return childproc.ProcFS{}.FlockHolder(dev, ino, os.Getpid())
}
