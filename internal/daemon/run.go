package daemon

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/bridge/local"
	"github.com/molecule-ai/codex-warm/bridge/molecule"
	"github.com/molecule-ai/codex-warm/internal/chatsettings"
	"github.com/molecule-ai/codex-warm/internal/codexauth"
	"github.com/molecule-ai/codex-warm/internal/control"
	"github.com/molecule-ai/codex-warm/internal/daemon/handoff"
	"github.com/molecule-ai/codex-warm/internal/health"
	"github.com/molecule-ai/codex-warm/internal/metrics"
	"github.com/molecule-ai/codex-warm/internal/retention"
	"github.com/molecule-ai/codex-warm/internal/secretset"
	"github.com/molecule-ai/codex-warm/sessions"
	"github.com/molecule-ai/codex-warm/supervisor"
	"github.com/molecule-ai/codex-warm/supervisor/chatjob"
)

// daemon is one running `supervisor run`: the pieces runDaemon starts and must stop in order.
type daemon struct {
	cfg     Config
	log     *zap.Logger
	info    control.DaemonInfo
	store   *sessions.Store
	sup     *supervisor.Supervisor
	molIn   *moleculeIntake // nil on the local inbox
	control *controlServer
	login   *loginGate // set by preflight
	// leanOverrides are the lean settings no config layer sets (lean.go); set by preflight.
	leanOverrides []string
	// codexModels is what the start-up check's codex said about models (chatmodels.go).
	codexModels codexModels
	settings    *chatsettings.Store // each chat's model and effort; set before the supervisor
	jobs        *chatjob.Jobs       // the jobs chat commands run on a chat's worker (/compact, /undo)
	// phase is phaseStarting, phaseServing or phaseDraining (the readiness probe's "inbox").
	phase atomic.Int32

	// What a reload needs (reload.go).
	mt         *MainThread
	exe        string             // the executable a reload runs: the path this daemon first started from
	self       *os.File           // this image's own executable, for a next image that gives everything back
	secrets    map[string]string  // the secret variables HardenProcess removed
	set        *secretset.Set     // every secret the daemon holds (secrets.go); crosses a reload
	loginOwner string             // who owns codex's ChatGPT login (codexauth.Owner*)
	tokens     *codexauth.Manager // the ChatGPT login the daemon holds, nil when each child holds its own
	lock       *stateLock
	met        *metrics.Metrics
	inboxSrv   *server      // nil on the Molecule inbox
	local      *local.Inbox // nil on the Molecule inbox
	metricsSrv *server
	controlSrv *server
	// stopIntake stops taking messages and waits, until ctx is done, for those in flight;
	// startIntake takes them again.
	stopIntake  func(ctx context.Context) error
	startIntake func()
	// awaitIntake, when set, waits (until ctx is done) for an intake stopIntake stopped
	// without waiting: one whose waiting callers the freeze lets go (ErrHandedOver).
	awaitIntake func(ctx context.Context) error
	// cutIntake, when set, makes a stop of the intake awaited after a refused freeze return
	// without waiting for its requests in flight (an event stream goes on by itself).
	cutIntake func()
	reloadReq chan string        // a requested reload, for the main loop
	failed    chan error         // a server or inbox that failed, for the main loop
	reloaded  bool               // a reload's exec started this image (continueFrom)
	givenBack bool               // this image took the daemon back from a next image that could not run it
	alive     chan chan struct{} // the watchdog's checks, answered by the main loop
	stopAsked atomic.Bool        // a stop came on the control socket
	// sigs and hups are the daemon's signal channels: the exec stops them, a failed one
	// takes them up again.
	sigs, hups chan os.Signal
	reloading  atomic.Bool
	reloadMu   sync.Mutex
	attempts   int
	lastReload *control.ReloadInfo
}

// daemonRun is what runDaemon runs with.
type daemonRun struct {
	cfg    Config
	getenv func(string) string
	log    *zap.Logger
	// sigs stop the daemon (a second one cuts the drain short); hups reload it.
	sigs, hups chan os.Signal
	mt         *MainThread
	version    string
	handoff    *handoff.Doc // the previous image's, when reloaded
	in         *incoming
}

// runDaemon runs until the first signal (graceful drain) or ctx is done; a second signal cuts
// the drain short. It returns only after every codex child was waited for.
//
// It starts the daemon in steps (start-up checks and login, stores, metrics, the children's
// template, the supervisor, the inbox and the listeners: assemble) and then runs the daemon's
// components until they stopped in the order shutdownOrder lists.
func runDaemon(ctx context.Context, r daemonRun) error {
	var held closers
	defer held.close()
	d, st, err := openDaemon(ctx, r, &held)
	if err != nil {
		return err
	}
	if err := d.openLogin(ctx, st, r, &held); err != nil {
		return err
	}
	ret, err := d.openStores()
	if err != nil {
		return err
	}
	budget, err := d.cfg.memoryBudget()
	if err != nil {
		return err
	}
	dirs := d.newMetrics(st)
	tmpl, thread := d.childTemplate(st, &held)
	// Past here nothing can be given back: the state lock, the children, the listeners and the
	// callers are taken.
	if err := r.in.commit(); err != nil {
		return err
	}
	if r.handoff != nil {
		d.lock = takeLock(r.handoff, d.cfg.StateDir)
		held.add(d.lock.Close)
	}
	if d.settings, err = d.openChatSettings(d.cfg, r.getenv); err != nil {
		return err
	}
	d.jobs = &chatjob.Jobs{}
	adopted := adoptChildren(r.handoff, tmpl, d.log)
	if d.sup, err = d.newSupervisor(tmpl, thread, ret, budget, adopted); err != nil {
		return err
	}
	stages, err := d.assemble(st, dirs, r.handoff)
	if err != nil {
		return d.abort(err)
	}
	if r.handoff != nil {
		d.log.Info("reload: took over from the previous image", zap.String("from_version", r.handoff.WrittenBy),
			zap.String("version", d.info.Version), zap.Int("children", len(adopted)), zap.Int("reloads", r.handoff.Reloads))
	}
	d.log.Info("supervisor running", zap.String("codex_bin", st.bin), zap.String("state_dir", d.cfg.StateDir),
		zap.String("inbox", d.cfg.Inbox), zap.Int("max_children", d.sup.Status().Totals.Cap))
	d.phase.Store(phaseServing)
	d.reloadServed()
	r.in.serving()
	d.notify(sd.SdNotifyReady)
	err = runStages(ctx, stages)
	d.log.Info("supervisor stopped")
	return err
}

// closers are what runDaemon holds open until it returns; they close the last taken first.
type closers []func() error

func (c *closers) add(close func() error) { *c = append(*c, close) }

func (c *closers) close() {
	for _, f := range slices.Backward(*c) {
		_ = f()
	}
}

// startEnv is what the start-up found, for the steps that assemble the daemon.
type startEnv struct {
	mcfg      molecule.Config // the Molecule inbox's configuration, from the environment
	env       []string        // the children's environment
	cred      *syscall.Credential
	bin       string // the codex binary
	codexHome string
	ready     *health.Readiness
	// refreshMetrics counts the ChatGPT token refreshes once the metrics exist (newMetrics);
	// those before (the start-up check's) go uncounted.
	refreshMetrics atomic.Pointer[metrics.Metrics]
}

// openDaemon is the start-up up to the login: the state directory and its lock, every secret
// read and the process hardened, the children's environment and user, and the codex binary.
func openDaemon(ctx context.Context, r daemonRun, held *closers) (*daemon, *startEnv, error) {
	cfg, getenv, log, hdoc := r.cfg, r.getenv, r.log, r.handoff
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("create state dir %s: %w", cfg.StateDir, err)
	}
	var lock *stateLock
	var err error
	if hdoc == nil {
		if lock, err = lockStateDir(cfg.StateDir); err != nil {
			return nil, nil, err
		}
		held.add(lock.Close)
	} // a reloaded image takes the lock's descriptor when it commits (runDaemon)
	secrets := make(map[string]string)
	for _, k := range secretEnv() {
		if v, ok := os.LookupEnv(k); ok {
			secrets[k] = v
		}
	}
	var carried map[string][][]string
	if hdoc != nil {
		carried = hdoc.Secrets
	}
	set := newSecretSet(secretInputs{removed: secrets, getenv: getenv, carried: carried,
		listenerTokens: []string{cfg.InboxToken, cfg.MetricsToken}})
	// Every log line passes the set: an error text can quote what codex printed or what a
	// platform echoed.
	log = set.Logger(log)

	st := &startEnv{}
	if cfg.Inbox == "molecule" {
		if st.mcfg, err = molecule.ConfigFromEnv(getenv); err != nil {
			return nil, nil, fmt.Errorf("molecule config: %w", err)
		}
		st.mcfg.Secrets = set
	}
	// Every secret is read by now.
	HardenProcess(log)
	if st.cred, st.env, err = childCredential(cfg.ChildUser, childEnv(os.Environ())); err != nil {
		return nil, nil, err
	}
	if cfg.LeanChildren {
		var dropped bool
		if st.env, dropped = leanEnv(st.env); dropped {
			log.Info("codex children run without SSL_CERT_DIR: SSL_CERT_FILE is that directory's bundle (--lean-children=false keeps it)")
		}
	}
	loc, err := FindCodex(cfg.CodexBin, cfg.CodexBinFrom)
	if err != nil {
		return nil, nil, fmt.Errorf("find codex: %w", err)
	}
	st.bin = loc.Bin
	if err := checkChildUserAtStart(ctx, cfg, st.cred, st.bin, st.env, log); err != nil {
		return nil, nil, err
	}
	d := &daemon{cfg: cfg, log: log, mt: r.mt, secrets: secrets, set: set, lock: lock, sigs: r.sigs, hups: r.hups,
		reloadReq: make(chan string, 1), alive: make(chan chan struct{})}
	d.info = control.DaemonInfo{PID: os.Getpid(), Version: r.version, Started: time.Now(), Inbox: cfg.Inbox, CodexBin: st.bin, StateDir: cfg.StateDir}
	if hdoc != nil {
		d.continueFrom(hdoc, r.in.givenBack)
	} else if d.exe, err = os.Executable(); err != nil {
		log.Warn("cannot tell this daemon's executable; it cannot reload in place", zap.Error(err))
		d.mt = nil
	}
	d.info.Executable = d.exe
	if d.self, err = os.Open("/proc/self/exe"); err != nil {
		log.Warn("cannot open this daemon's own executable: a new binary that fails to take over cannot give it back", zap.Error(err))
	} else {
		held.add(d.self.Close)
	}
	st.codexHome = appserver.EffectiveCodexHome(st.env)
	readAuthFile(set, st.codexHome)
	return d, st, nil
}

// openLogin decides who holds codex's ChatGPT login and opens it, then runs the start-up checks
// and sets up the login gate (preflight) and the readiness probe.
func (d *daemon) openLogin(ctx context.Context, st *startEnv, r daemonRun, held *closers) error {
	var platform *molecule.Config
	if d.cfg.Inbox == "molecule" {
		platform = &st.mcfg
	}
	plan, err := planLogin(ctx, loginInputs{mode: d.cfg.ChatGPTTokens, env: platformEnv(d.secrets), platform: platform,
		codexHome: st.codexHome, secrets: d.set}, d.log)
	if err != nil {
		return err
	}
	d.loginOwner = plan.owner
	tokens, err := openTokens(d.cfg, plan, st.codexHome, r.getenv, func(outcome string) {
		if m := st.refreshMetrics.Load(); m != nil {
			m.ObserveTokenRefresh(outcome)
		}
	}, carriedLogin(r.handoff, d.log), d.log)
	if err != nil {
		return err
	}
	if tokens != nil {
		held.add(func() error { tokens.Close(); return nil })
		d.tokens = tokens
	}
	if err := d.preflight(ctx, st.bin, st.env, st.cred, tokens); err != nil {
		return err
	}
	st.ready = d.readiness(st.bin, st.codexHome)
	return nil
}

// openStores opens sessions.json and the archive log.
func (d *daemon) openStores() (*retention.Log, error) {
	var err error
	d.store, err = sessions.Open(sessions.Config{Dir: d.cfg.StateDir, Logger: d.log})
	if err != nil {
		return nil, fmt.Errorf("open sessions: %w", err)
	}
	if p, ok := d.store.Recovered(); ok {
		d.log.Error("sessions.json was unreadable and was moved aside; conversations start fresh", zap.String("moved_to", p))
	}
	d.log.Info("sessions loaded", zap.String("path", d.store.Path()), zap.Int("chats", d.store.Len()))
	ret, err := retention.Open(retention.Config{Dir: d.cfg.StateDir, Store: d.store, Logger: d.log})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", sessions.ArchiveFileName, err)
	}
	return ret, nil
}

// molecule is the running Molecule inbox, nil on the local inbox.
func (d *daemon) molecule() *molecule.Inbox {
	if d.molIn == nil {
		return nil
	}
	return d.molIn.current()
}

// abort stops a daemon whose start failed after the supervisor was created.
func (d *daemon) abort(err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = d.sup.Shutdown(ctx)
	return err
}
