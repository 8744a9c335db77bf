package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/bridge/local"
	"github.com/molecule-ai/codex-warm/bridge/molecule"
	"github.com/molecule-ai/codex-warm/internal/atomicfile"
	"github.com/molecule-ai/codex-warm/internal/childproc"
	"github.com/molecule-ai/codex-warm/internal/codexauth"
	"github.com/molecule-ai/codex-warm/internal/codexversion"
	"github.com/molecule-ai/codex-warm/internal/control"
	"github.com/molecule-ai/codex-warm/internal/protocol"
	"github.com/molecule-ai/codex-warm/sessions"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// Status is the outcome of one doctor check.
type Status int

// Statuses of a check.
const (
	OK   Status = iota // works
	Warn               // works, but worth fixing; does not fail doctor
	Fail               // run would fail, or the daemon could not answer messages
	Skip               // does not apply to this configuration
)

func (s Status) mark() string {
	return [...]string{"✓", "!", "✗", "-"}[s]
}

// Result is one line of `supervisor doctor`.
type Result struct {
	Name   string
	Status Status
	Detail string
	// Fix says what to do; empty for OK and Skip.
	Fix string
}

// String is the line as `supervisor doctor` prints it: mark, name, detail and fix.
func (r Result) String() string {
	s := fmt.Sprintf("%s %-14s %s", r.Status.mark(), r.Name, r.Detail)
	if r.Fix != "" {
		s += " — fix: " + r.Fix
	}
	return s
}

func ok(name, format string, a ...any) Result {
	return Result{Name: name, Status: OK, Detail: fmt.Sprintf(format, a...)}
}

func skip(name, detail string) Result {
	return Result{Name: name, Status: Skip, Detail: detail}
}

func warn(name, detail, fix string) Result {
	return Result{Name: name, Status: Warn, Detail: detail, Fix: fix}
}

func fail(name, detail, fix string) Result {
	return Result{Name: name, Status: Fail, Detail: detail, Fix: fix}
}

// doctorTimeout bounds each check that waits on something outside (codex, the platform).
const doctorTimeout = 30 * time.Second

// doctor runs the checks for one configuration.
type doctor struct {
	cfg    Config
	getenv func(string) string
	env    []string
	cred   *syscall.Credential

	// Set by the checks for the ones after them.
	codex   Codex
	running *control.StatusDoc // the daemon running on the state dir, if any
}

// Run runs every check for cfg, in order, each after what it depends on; cfgErr is what was
// wrong with the configuration (a line of its own).
func Run(ctx context.Context, cfg Config, cfgErr error) []Result {
	d := &doctor{cfg: cfg, getenv: cfg.Getenv, env: cfg.Env, cred: cfg.Credential}
	return d.run(ctx, cfgErr)
}

func (d *doctor) run(ctx context.Context, cfgErr error) []Result {
	var out []Result
	// An exposed listen address has a line of its own below.
	if cfgErr != nil && !errors.Is(cfgErr, local.ErrExposedWithoutToken) {
		out = append(out, fail("configuration", cfgErr.Error(), "see `supervisor run -h`"))
	}
	bin := d.checkCodexBinary()
	out = append(out, bin)
	version := skip("codex version", "not checked: no codex binary")
	if bin.Status != Fail {
		version = d.checkCodexVersion(ctx)
	}
	out = append(out, version, d.checkChildUser(ctx))
	home, homeUsable := d.checkCodexHome()
	if version.Status == Fail || version.Status == Skip || !homeUsable {
		out = append(out, home, skip("codex login", "not checked: codex cannot start"))
	} else {
		out = append(out, d.checkCodexLogin(ctx, home)...)
	}
	if homeUsable {
		out = append(out, d.checkChatGPTTokens(), d.checkDisk())
	}
	out = append(out, d.checkBubblewrap())
	d.findRunningDaemon(ctx)
	out = append(out, d.checkRunningLogin())
	state := d.checkStateDir()
	out = append(out, state)
	if state.Status == Fail {
		out = append(out, skip("sessions.json", "not checked: no usable state directory"))
	} else {
		out = append(out, d.checkSessions())
	}
	out = append(out, d.checkListen())
	out = append(out, d.checkMolecule(ctx)...)
	out = append(out, d.checkMemory())
	return out
}

func (d *doctor) checkCodexBinary() Result {
	const name = "codex binary"
	loc, err := d.cfg.Steps.FindCodex()
	switch {
	case errors.Is(err, appserver.ErrNoCodex):
		return fail(name, "no codex given, none beside supervisor, none in PATH", d.cfg.NoCodexHint)
	case err != nil:
		return fail(name, err.Error(), "point --codex-bin (CODEX_BIN) at the native codex binary")
	}
	d.codex = loc
	kind := "native binary"
	if loc.Given != loc.Bin {
		kind = fmt.Sprintf("native binary behind the npm node wrapper %s (the daemon runs the native one)", loc.Given)
	}
	return ok(name, "%s: %s, from %s", loc.Bin, kind, loc.From)
}

func (d *doctor) checkCodexVersion(ctx context.Context) Result {
	const name = "codex version"
	ctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	v, err := appserver.Version(ctx, d.codex.Bin, d.env)
	if err != nil {
		return fail(name, err.Error(), "point --codex-bin (CODEX_BIN) at the codex CLI, @openai/codex "+codexversion.Newest)
	}
	where, err := codexversion.Range(v)
	if err != nil {
		return warn(name, fmt.Sprintf("codex-cli %s: %v; this release is tested with %s to %s", v, err, codexversion.Oldest, codexversion.Newest),
			"install @openai/codex@"+codexversion.Newest+" (`make install` puts it beside supervisor)")
	}
	if where != 0 {
		detail, fix := codexversion.Risk(v, where)
		return warn(name, detail, fix)
	}
	return ok(name, "codex-cli %s, within the versions this release is tested with (%s to %s)", v, codexversion.Oldest, codexversion.Newest)
}

// checkCodexHome checks that the CODEX_HOME codex will use can be used; usable is false when
// codex would refuse to start with it.
func (d *doctor) checkCodexHome() (res Result, usable bool) {
	const name = "CODEX_HOME"
	home := appserver.EffectiveCodexHome(d.env)
	from := "from CODEX_HOME"
	if h, set := os.LookupEnv("CODEX_HOME"); !set || h == "" || d.cfg.ChildUser != "" {
		from = "codex's default, $HOME/.codex"
	}
	fi, err := os.Stat(home)
	switch {
	case errors.Is(err, os.ErrNotExist) && from == "from CODEX_HOME":
		return fail(name, fmt.Sprintf("%s (%s) does not exist: codex refuses to start", home, from), "mkdir -m 700 "+home+", then log codex in"), false
	case errors.Is(err, os.ErrNotExist):
		return ok(name, "%s (%s) does not exist yet: `codex login` creates it", home, from), true
	case err != nil:
		return fail(name, err.Error(), "make "+home+" readable by the daemon's user"), false
	case !fi.IsDir():
		return fail(name, home+" is not a directory", "point CODEX_HOME at a directory"), false
	}
	return ok(name, "%s (%s)", home, from), true
}

// checkCodexLogin starts a short-lived codex app-server as run's login check does and reports
// its login and its effective model provider, which is what the login depends on.
func (d *doctor) checkCodexLogin(ctx context.Context, home Result) []Result {
	tmpl := appserver.Config{Bin: d.codex.Bin, Env: d.env, Credential: d.cred, ConfigOverrides: d.cfg.CodexConfig,
		HandshakeTimeout: loginCheckTimeout, Logger: zap.NewNop()}
	var conf protocol.EffectiveConfig
	var confErr error
	a := d.cfg.Steps.ProbeCodex(ctx, tmpl, func(ctx context.Context, c *appserver.Client) {
		var res protocol.ConfigReadResult
		res, confErr = c.ReadConfig(ctx, d.cfg.Cwd)
		conf = res.Config
	})
	provider, model := "openai (default)", "codex's default"
	if conf.ModelProvider != nil {
		provider = fmt.Sprintf("%q", *conf.ModelProvider)
	}
	if conf.Model != nil {
		model = fmt.Sprintf("%q", *conf.Model)
	}
	codexHome := appserver.EffectiveCodexHome(d.env)
	cfgFile := filepath.Join(codexHome, "config.toml")
	if _, err := os.Stat(cfgFile); err == nil {
		home.Detail += fmt.Sprintf("; %s: model %s, model provider %s", cfgFile, model, provider)
	} else {
		home.Detail += fmt.Sprintf("; no config.toml: model %s, model provider %s", model, provider)
	}
	if confErr != nil && a.State != control.CodexAuthUnknown {
		home.Detail += " (config/read failed: " + confErr.Error() + ")"
	}

	const name = "codex login"
	login := fmt.Sprintf("CODEX_HOME=%s %s login", codexHome, d.codex.Given)
	as := "as the daemon's user"
	if d.cfg.ChildUser != "" {
		as = "as " + d.cfg.ChildUser
	}
	var res Result
	switch {
	case a.State == control.CodexLoggedIn && a.Account != "":
		res = ok(name, "logged in (%s)", a.Account)
	case a.State == control.CodexLoggedIn:
		res = ok(name, "no login needed: model provider %s brings its own credentials", provider)
	case a.State == control.CodexNotLoggedIn:
		res = fail(name, fmt.Sprintf("not logged in, and model provider %s needs an OpenAI login: every message would be answered with a login hint", provider),
			fmt.Sprintf("%s, run `%s` (with --with-api-key it reads an API key from stdin)", as, login))
	default:
		res = fail(name, "could not ask codex: "+a.Detail, "make `"+d.codex.Bin+" app-server` start with this CODEX_HOME")
	}
	switch {
	case confErr != nil:
		return []Result{home, res, skip("model endpoint", "not checked: config/read failed")}
	case res.Status == Fail:
		return []Result{home, res, skip("model endpoint", "not checked: codex cannot log in")}
	}
	return []Result{home, res, d.checkModelEndpoint(ctx, conf, a.Account)}
}

// Endpoints of codex's built-in openai provider (codex 0.169): the ChatGPT backend with a
// ChatGPT login, the API with a key.
const (
	chatGPTModelURL = "https://chatgpt.com/backend-api/codex"
	openAIModelURL  = "https://api.openai.com/v1"
)

// checkModelEndpoint asks the model provider's endpoint for anything: an HTTP answer of any status
// means codex can reach it; no answer (DNS, refused, TLS, proxy) means every turn would wait for a
// model that never answers. It sends no credentials and spends nothing.
func (d *doctor) checkModelEndpoint(ctx context.Context, conf protocol.EffectiveConfig, account string) Result {
	const name = "model endpoint"
	provider := "openai"
	if conf.ModelProvider != nil {
		provider = *conf.ModelProvider
	}
	url := openAIModelURL
	switch p, ok := conf.ModelProviders[provider]; {
	case ok && p.BaseURL != nil:
		url = *p.BaseURL
	case ok || provider != "openai":
		return skip(name, fmt.Sprintf("model provider %q has no base_url to check", provider))
	case account == "chatgpt":
		url = chatGPTModelURL
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fail(name, fmt.Sprintf("model provider %q: base_url %q: %v", provider, url, err), "fix base_url in "+filepath.Join(appserver.EffectiveCodexHome(d.env), "config.toml"))
	}
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	if err != nil {
		return fail(name, fmt.Sprintf("model provider %q at %s cannot be reached: %v: every turn would wait for it (the daemon ends such turns after --model-unreachable-timeout)", provider, url, err),
			"check the provider's base_url, DNS, the proxy (HTTPS_PROXY) and the trust store (SSL_CERT_FILE) of the daemon's user")
	}
	resp.Body.Close()
	return ok(name, "model provider %q at %s answers (HTTP %d)", provider, url, resp.StatusCode)
}

// checkChatGPTTokens explains who renews codex's login (docs/login.md): the platform that
// provides it (the daemon only reads it), the daemon (a ChatGPT login in CODEX_HOME, refreshed
// once for every child), or each child. off with a login the platform owns is an error: each
// child would spend the org's single-use refresh token.
func (d *doctor) checkChatGPTTokens() Result {
	const name = "ChatGPT tokens"
	home := appserver.EffectiveCodexHome(d.env)
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.PlatformTimeout)
	defer cancel()
	plan, err := d.cfg.Steps.PlanLogin(ctx, home)
	if err != nil {
		return fail(name, err.Error(), "set --chatgpt-tokens (CODEX_WARM_CHATGPT_TOKENS) to auto or platform, or remove the platform's CODEX_AUTH_JSON")
	}
	if plan.Owner == codexauth.OwnerPlatform {
		m, _, err := codexauth.Open(codexauth.Config{CodexHome: home, Platform: plan.Sources, RequestTimeout: d.cfg.PlatformTimeout})
		if err != nil {
			return fail(name, "the platform owns the ChatGPT login ("+plan.Why+") but it cannot be read: "+err.Error(),
				"check the workspace's CODEX_AUTH_JSON on the platform and the daemon's platform settings")
		}
		defer m.Close()
		st := m.Status()
		return ok(name, "owned by the platform (%s): the daemon reads it (now from %s, plan %s, %s), hands it to every codex child, "+
			"reads it again every %s and never calls the token endpoint", plan.Why, st.Source, orDash(st.PlanType), expiry(st), d.cfg.ChatGPTPlatformCheck)
	}
	m, kind, err := codexauth.Open(codexauth.Config{CodexHome: home, TokenURL: codexauth.TokenURLFrom(os.Getenv)})
	switch {
	case err != nil:
		return fail(name, err.Error(), "log codex in again: "+d.codex.Given+" login")
	case m == nil:
		return ok(name, "not a ChatGPT login (%s): codex manages its own credentials", kind)
	}
	defer m.Close()
	st := m.Status()
	if fi, err := os.Stat(filepath.Join(home, codexauth.AuthFile)); err == nil && fi.Mode().Perm()&0o077 != 0 {
		return warn(name, fmt.Sprintf("%s is readable by other users (mode %04o): it holds the ChatGPT refresh token",
			filepath.Join(home, codexauth.AuthFile), fi.Mode().Perm()), "chmod 600 "+filepath.Join(home, codexauth.AuthFile))
	}
	if plan.Owner == codexauth.OwnerChild {
		return warn(name, "--chatgpt-tokens off: each codex child refreshes the ChatGPT login on its own, and children that meet an expired token together spend one refresh token several times (all but one are then told to log in)",
			"drop --chatgpt-tokens off (CODEX_WARM_CHATGPT_TOKENS)")
	}
	return ok(name, "owned by the daemon (%s; plan %s, %s): it refreshes the login once for every codex child, %s before expiry and on a child's 401, writes it back to auth.json, and children never touch auth.json; token endpoint %s",
		plan.Why, orDash(st.PlanType), expiry(st), d.cfg.TokenRefreshAhead, codexauth.TokenURLFrom(os.Getenv))
}

// checkRunningLogin reports what the running daemon knows of the login it holds: a rotated
// login it could not write back (it holds the only copy of the live refresh token), or a
// refresh in doubt.
func (d *doctor) checkRunningLogin() Result {
	const name = "running daemon's login"
	if d.running == nil || d.running.Daemon.CodexAuth == nil || d.running.Daemon.CodexAuth.Tokens == nil {
		return skip(name, "no running daemon holds a ChatGPT login on this state dir")
	}
	t := d.running.Daemon.CodexAuth.Tokens
	switch {
	case t.WriteBackError != "":
		return fail(name, "the daemon (pid "+fmt.Sprint(d.running.Daemon.PID)+") refreshed the login but cannot write it back to auth.json: "+t.WriteBackError+
			"; it holds the only copy of the live refresh token and retries", "free space or fix permissions in CODEX_HOME; do not restart the daemon until `supervisor status` shows no write-back error")
	case t.State == codexauth.StateUncertain:
		return fail(name, t.LastError, "run `codex login` as the daemon's user (the daemon adopts the new login at once)")
	case t.State == codexauth.StateGone:
		return fail(name, t.LastError, "run `codex login` as the daemon's user")
	}
	return ok(name, "%s (owned by the %s)", t.State, t.Owner)
}

func expiry(st codexauth.Status) string {
	if st.Expires.IsZero() {
		return "no expiry claim"
	}
	return "access token expires " + st.Expires.UTC().Format(time.RFC3339)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (d *doctor) checkBubblewrap() Result {
	const name = "bubblewrap"
	p, err := exec.LookPath("bwrap")
	if err != nil {
		return warn(name, "bwrap is not in PATH: codex sandboxes commands with its bundled copy and logs an error at every start",
			"apt-get install bubblewrap")
	}
	return ok(name, "%s", p)
}

// findRunningDaemon asks the state dir's control socket whether a daemon runs there: its lock,
// socket and listen address then explain what would otherwise look like conflicts.
func (d *doctor) findRunningDaemon(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if doc, err := control.NewClient(d.cfg.StateDir).Status(ctx); err == nil {
		d.running = &doc
	}
}

func (d *doctor) checkStateDir() Result {
	const name = "state dir"
	dir := d.cfg.StateDir
	fi, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		parent := filepath.Dir(dir)
		for {
			if _, err := os.Stat(parent); err == nil || parent == filepath.Dir(parent) {
				break
			}
			parent = filepath.Dir(parent)
		}
		if err := atomicfile.CheckWritable(parent); err != nil {
			return fail(name, fmt.Sprintf("%s does not exist and cannot be created: %v", dir, err),
				"create it for the daemon's user: install -d -m 700 "+dir)
		}
		return ok(name, "%s does not exist yet; run creates it (mode 0700)", dir)
	}
	switch {
	case err != nil:
		return fail(name, err.Error(), "make "+dir+" reachable by the daemon's user")
	case !fi.IsDir():
		return fail(name, dir+" is not a directory", "point --state-dir at a directory")
	}
	if err := atomicfile.CheckWritable(dir); err != nil {
		return fail(name, err.Error(), "give the daemon's user write access: chown it to that user and chmod 700 "+dir)
	}
	detail := fmt.Sprintf("%s (mode %04o, writable)", dir, fi.Mode().Perm())
	if d.running != nil {
		detail += fmt.Sprintf("; a daemon runs on it (pid %d): a second run would be refused", d.running.Daemon.PID)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return warn(name, detail+": other users can read or enter it (chat thread ids, the control socket)", "chmod 700 "+dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return warn(name, detail+fmt.Sprintf(": owned by uid %d, not by the daemon's user (uid %d)", st.Uid, os.Geteuid()),
			"chown it to the user the daemon runs as")
	}
	return ok(name, "%s", detail)
}

func (d *doctor) checkSessions() Result {
	const name = "sessions.json"
	rep, err := sessions.Check(d.cfg.StateDir)
	switch {
	case errors.Is(err, sessions.ErrCorrupt):
		return fail(name, err.Error()+": run would move it aside and every chat would start a new conversation",
			"restore "+rep.Path+" from a backup, or accept that run moves it aside")
	case errors.Is(err, atomicfile.ErrSymlink):
		return fail(name, err.Error()+": run refuses to start", "replace the link with the file it points to")
	case err != nil:
		return fail(name, err.Error(), "make "+rep.Path+" readable by the daemon's user")
	case !rep.Exists:
		return ok(name, "none yet: run starts with no conversations")
	case rep.Dropped > 0:
		return warn(name, fmt.Sprintf("%d conversations, %d unusable entries: run copies the file aside and drops them", rep.Entries, rep.Dropped),
			"nothing, unless those chats matter: see "+rep.Path)
	}
	if missing := missingThreads(appserver.EffectiveCodexHome(d.env), rep.Threads); len(missing) > 0 {
		home := appserver.EffectiveCodexHome(d.env)
		return warn(name, fmt.Sprintf("%d of %d conversations not found in CODEX_HOME %s (e.g. chat %s, thread %s): they would start over, their ids kept in threads-archive.jsonl",
			len(missing), rep.Entries, home, missing[0], rep.Threads[missing[0]]),
			"point CODEX_HOME at the codex home the old daemon used (codex-channel-molecule ran codex with the user's default, $HOME/.codex), or copy its sessions/ folder into "+home)
	}
	return ok(name, "%d conversations, each found in CODEX_HOME", rep.Entries)
}

// missingThreads returns the chat keys (sorted) whose thread has no rollout file under
// codexHome: codex 0.169 keeps each thread in sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl
// (archived_sessions/ for archived ones), and cannot resume a thread without it.
func missingThreads(codexHome string, threads map[string]string) []string {
	if len(threads) == 0 {
		return nil
	}
	found := make(map[string]bool)
	const maxFiles = 1 << 20 // a bound on the walk, far beyond any real codex home
	n := 0
	for _, sub := range []string{"sessions", "archived_sessions"} {
		_ = filepath.WalkDir(filepath.Join(codexHome, sub), func(path string, e fs.DirEntry, err error) error {
			if err != nil || n >= maxFiles {
				return filepath.SkipDir
			}
			n++
			name := e.Name()
			if !e.IsDir() && strings.HasPrefix(name, "rollout-") && strings.HasSuffix(name, ".jsonl") && len(name) > len(".jsonl")+36 {
				found[strings.TrimSuffix(name, ".jsonl")[len(name)-len(".jsonl")-36:]] = true
			}
			return nil
		})
	}
	var missing []string
	for key, id := range threads {
		if !found[id] {
			missing = append(missing, key)
		}
	}
	slices.Sort(missing)
	return missing
}

func (d *doctor) checkListen() Result {
	const name = "listen"
	if d.cfg.Inbox != "local" {
		return skip(name, "not used (--inbox "+d.cfg.Inbox+")")
	}
	addr := d.cfg.Listen
	if err := local.CheckListenAddress(addr, d.cfg.InboxTokenSet); err != nil {
		return fail(name, err.Error(), "--listen 127.0.0.1:PORT, or set CODEX_WARM_INBOX_TOKEN (or --inbox-token-file)")
	}
	host, port, _ := net.SplitHostPort(addr)
	where := "loopback"
	if !local.IsLoopbackHost(host) {
		where = "beyond loopback, with a token"
	}
	if port == "0" {
		return ok(name, "%s: %s; run picks a free port (`supervisor status` shows it)", addr, where)
	}
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		_ = ln.Close()
		return ok(name, "%s: %s, free", addr, where)
	}
	if d.running != nil && d.running.Daemon.Listen == addr {
		return ok(name, "%s: %s, in use by the running daemon (pid %d)", addr, where, d.running.Daemon.PID)
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		return fail(name, addr+" is in use by another process", "choose another --listen (CODEX_WARM_LISTEN), or stop that process")
	}
	return fail(name, err.Error(), "choose an address of this machine for --listen")
}

func (d *doctor) checkMolecule(ctx context.Context) []Result {
	if d.cfg.Inbox != "molecule" {
		return []Result{skip("molecule env", "not used (--inbox "+d.cfg.Inbox+")"), skip("platform", "not used")}
	}
	mcfg, err := molecule.ConfigFromEnv(d.getenv)
	if err != nil {
		return []Result{fail("molecule env", err.Error(),
			"set MOLECULE_API_URL (or PLATFORM_URL), MOLECULE_WORKSPACE_ID (or WORKSPACE_ID) and MOLECULE_WORKSPACE_TOKEN (or write <configs>/.auth_token)"), skip("platform", "not checked")}
	}
	urlVar, _ := molecule.FirstEnv(d.getenv, molecule.PlatformURLEnv)
	wsVar, _ := molecule.FirstEnv(d.getenv, molecule.WorkspaceIDEnv)
	org := "MOLECULE_ORG_ID not set (a SaaS tenant needs it)"
	if mcfg.OrgID != "" {
		org = "MOLECULE_ORG_ID " + mcfg.OrgID
	}
	env := ok("molecule env", "%s %s, %s %s, %s, token set (token file %s)", urlVar, mcfg.PlatformURL, wsVar, mcfg.WorkspaceID, org, mcfg.TokenFile)
	mcfg.RequestTimeout = min(d.cfg.PlatformTimeout, doctorTimeout)
	err = molecule.ProbePlatform(ctx, mcfg)
	var he *molecule.HTTPError
	switch {
	case err == nil:
		return []Result{env, ok("platform", "answers and accepts the token and workspace (one read of the activity feed; nothing registered)"),
			d.checkEventStream(ctx, mcfg)}
	case errors.As(err, &he) && he.TenantOrgRequired():
		return []Result{env, fail("platform", err.Error()+": the tenant guard wants X-Molecule-Org-Id and MOLECULE_ORG_ID is not set",
			"set MOLECULE_ORG_ID to the organization's UUID (a SaaS tenant reached through the control plane needs it on every call)")}
	case errors.As(err, &he) && he.RateLimited():
		return []Result{env, warn("platform", err.Error()+": the platform's rate limit is spent for now (600 requests a minute, shared by the org when MOLECULE_ORG_ID is set)",
			"try again after the Retry-After; run waits for it by itself")}
	case errors.As(err, &he) && he.Unauthorized():
		return []Result{env, fail("platform", err.Error()+": the token was refused", "check MOLECULE_WORKSPACE_TOKEN (or <configs>/.auth_token)")}
	case errors.As(err, &he) && he.Status == http.StatusNotFound && mcfg.OrgID != "":
		return []Result{env, fail("platform", err.Error()+": the workspace is unknown, or MOLECULE_ORG_ID is not this tenant's organization",
			"check "+wsVar+" and MOLECULE_ORG_ID")}
	case errors.As(err, &he) && he.Status == http.StatusNotFound:
		return []Result{env, fail("platform", err.Error()+": the workspace is unknown", "check "+wsVar)}
	case errors.As(err, &he) && he.Redirect():
		return []Result{env, fail("platform", err.Error(), "set "+urlVar+" to the address that answers")}
	}
	return []Result{env, fail("platform", "not reachable: "+err.Error(), "check "+urlVar+" and the network path to it")}
}

// checkEventStream says whether the platform offers the workspace's event stream: with it a
// message is answered as it arrives, without it at the next poll.
func (d *doctor) checkEventStream(ctx context.Context, mcfg molecule.Config) Result {
	const name = "event stream"
	if !d.cfg.EventStream {
		return skip(name, "not used (--event-stream=false): messages wait for the next poll")
	}
	offered, err := molecule.ProbeEventStream(ctx, mcfg)
	switch {
	case err != nil:
		return warn(name, "could not tell whether the platform offers it: "+err.Error(),
			"run polls every --poll-interval until the stream connects")
	case !offered:
		return warn(name, "the platform offers none: messages wait for the next poll (every --poll-interval)",
			"nothing to do here; run looks for the stream again every 10 minutes")
	}
	return ok(name, "offered: messages are polled for as they arrive (one connect; the poll runs every --safety-poll-interval while it is up)")
}

// checkMemory reports the memory budget run would use (--memory-budget) against MemAvailable,
// and about how many warm children it holds.
func (d *doctor) checkMemory() Result {
	const name = "memory"
	avail, err := childproc.ProcFS{}.MemAvailable()
	if err != nil {
		return warn(name, err.Error()+": run would have no memory budget, only --max-children", "set --memory-budget to a size")
	}
	budget, err := d.cfg.MemoryBudget, d.cfg.MemoryBudgetErr
	if err != nil {
		return fail(name, err.Error(), "set --memory-budget to a size, a fraction such as 0.5, or off")
	}
	if budget == 0 {
		budget = int64(float64(avail) * supervisor.DefaultMemoryBudgetFraction)
	}
	if budget < 0 {
		return ok(name, "MemAvailable %s; no memory budget (off): at most --max-children %d codex children", control.HumanBytes(avail), d.cfg.MaxChildren)
	}
	detail := fmt.Sprintf("MemAvailable %s; memory budget %s of the children's PSS: about %d warm children at ~%s each, at most --max-children %d",
		control.HumanBytes(avail), control.HumanBytes(budget), budget/supervisor.DefaultChildEstimate, control.HumanBytes(supervisor.DefaultChildEstimate), d.cfg.MaxChildren)
	if budget > avail {
		return warn(name, detail+": the budget is above MemAvailable, so the kernel may kill children before the budget binds",
			"lower --memory-budget, or leave it to its default (half of MemAvailable)")
	}
	return ok(name, "%s", detail)
}
