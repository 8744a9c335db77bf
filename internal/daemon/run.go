package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/bridge/chat"
	"github.com/molecule-ai/codex-warm/bridge/local"
	"github.com/molecule-ai/codex-warm/bridge/molecule"
	"github.com/molecule-ai/codex-warm/internal/cannedmodel"
	"github.com/molecule-ai/codex-warm/internal/chatfiles"
	"github.com/molecule-ai/codex-warm/internal/chatsettings"
	"github.com/molecule-ai/codex-warm/internal/codexauth"
	"github.com/molecule-ai/codex-warm/internal/control"
	"github.com/molecule-ai/codex-warm/internal/daemon/handoff"
	"github.com/molecule-ai/codex-warm/internal/metrics"
	"github.com/molecule-ai/codex-warm/internal/protocol"
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
	mol     atomic.Pointer[molecule.Inbox] // replaced when a reload is called off
	control *controlServer
	login   *loginGate // set by preflight
	// leanOverrides are the lean settings no config layer sets (lean.go); set by preflight.
	leanOverrides []string
	// codexModels is what the start-up check's codex said about models (chatmodels.go).
	codexModels codexModels
	settings    *chatsettings.Store // each chat's model and effort; set before the supervisor
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
func runDaemon(ctx context.Context, r daemonRun) error {
	cfg, getenv, log, sigs, hdoc := r.cfg, r.getenv, r.log, r.sigs, r.handoff
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("create state dir %s: %w", cfg.StateDir, err)
	}
	var lock *stateLock
	var err error
	if hdoc == nil {
		if lock, err = lockStateDir(cfg.StateDir); err != nil {
			return err
		}
		defer lock.Close()
	} // a reloaded image takes the lock's descriptor when it commits (below)
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

	var mcfg molecule.Config
	if cfg.Inbox == "molecule" {
		if mcfg, err = molecule.ConfigFromEnv(getenv); err != nil {
			return fmt.Errorf("molecule config: %w", err)
		}
		mcfg.Secrets = set
	}
	// Every secret is read by now.
	HardenProcess(log)
	env := childEnv(os.Environ())
	cred, env, err := childCredential(cfg.ChildUser, env)
	if err != nil {
		return err
	}
	if cfg.LeanChildren {
		var dropped bool
		if env, dropped = leanEnv(env); dropped {
			log.Info("codex children run without SSL_CERT_DIR: SSL_CERT_FILE is that directory's bundle (--lean-children=false keeps it)")
		}
	}

	loc, err := FindCodex(cfg.CodexBin, cfg.CodexBinFrom)
	if err != nil {
		return fmt.Errorf("find codex: %w", err)
	}
	bin := loc.Bin
	if err := checkChildUserAtStart(ctx, cfg, cred, bin, env, log); err != nil {
		return err
	}
	d := &daemon{cfg: cfg, log: log, mt: r.mt, secrets: secrets, set: set, lock: lock, sigs: r.sigs, hups: r.hups,
		reloadReq: make(chan string, 1), alive: make(chan chan struct{})}
	d.info = control.DaemonInfo{PID: os.Getpid(), Version: r.version, Started: time.Now(), Inbox: cfg.Inbox, CodexBin: bin, StateDir: cfg.StateDir}
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
		defer d.self.Close()
	}
	codexHome := appserver.EffectiveCodexHome(env)
	readAuthFile(set, codexHome)
	// The metrics are built below; refreshes before that (the start-up check's) go uncounted.
	var refreshMetrics atomic.Pointer[metrics.Metrics]
	var platform *molecule.Config
	if cfg.Inbox == "molecule" {
		platform = &mcfg
	}
	plan, err := planLogin(ctx, loginInputs{mode: cfg.ChatGPTTokens, env: platformEnv(secrets), platform: platform, codexHome: codexHome, secrets: set}, log)
	if err != nil {
		return err
	}
	d.loginOwner = plan.owner
	tokens, err := openTokens(cfg, plan, codexHome, getenv, func(outcome string) {
		if m := refreshMetrics.Load(); m != nil {
			m.ObserveTokenRefresh(outcome)
		}
	}, carriedLogin(hdoc, log), log)
	if err != nil {
		return err
	}
	if tokens != nil {
		defer tokens.Close()
		d.tokens = tokens
	}
	if err := d.preflight(ctx, bin, env, cred, tokens); err != nil {
		return err
	}
	ready := d.readiness(bin, codexHome)

	d.store, err = sessions.Open(sessions.Config{Dir: cfg.StateDir, Logger: log})
	if err != nil {
		return fmt.Errorf("open sessions: %w", err)
	}
	if p, ok := d.store.Recovered(); ok {
		log.Error("sessions.json was unreadable and was moved aside; conversations start fresh", zap.String("moved_to", p))
	}
	log.Info("sessions loaded", zap.String("path", d.store.Path()), zap.Int("chats", d.store.Len()))
	ret, err := retention.Open(retention.Config{Dir: cfg.StateDir, Store: d.store, Logger: log})
	if err != nil {
		return fmt.Errorf("open %s: %w", sessions.ArchiveFileName, err)
	}

	policy := appserver.DefaultPolicy()
	thread := appserver.ThreadOptions{Cwd: cfg.Cwd}
	switch cfg.Approval {
	case "accept":
		policy = appserver.AcceptPolicy()
	case "ask":
		policy = appserver.AskPolicy()
		// A person answers, so codex asks before every command not known to be safe. It has to
		// be asked for on thread/start: codex 0.169 refuses approval_policy = "untrusted" in
		// its config ("no longer supported") yet takes it there
		// (testdata/codex-wire/approval-declined.jsonl).
		thread.ApprovalPolicy = "untrusted"
	}
	budget, err := cfg.memoryBudget()
	if err != nil {
		return err
	}
	var met *metrics.Metrics
	var onTurn func(supervisor.TurnEvent)
	var dirs *metrics.DirSampler // walks CODEX_HOME and the state dir for codex_warm_dir_bytes
	if cfg.MetricsListen != "" {
		dirs = metrics.NewDirSampler(metrics.DirSamplerConfig{Logger: log,
			Dirs: map[string]string{metrics.DirCodexHome: codexHome, metrics.DirState: cfg.StateDir}})
		mc := metrics.Config{Status: func() supervisor.Snapshot { return d.sup.Status() },
			Limits: func() supervisor.LimitStatus { return d.sup.Limits() }, Logger: log,
			DirSizes: dirs.Sizes, OldestIdle: func() (time.Duration, bool) { return d.sup.OldestIdle() }}
		mc.Retention = func() metrics.RetentionCounts { return retentionMetrics(d.sup) }
		if cfg.Inbox == "molecule" {
			// The inbox is set before the metrics listener starts.
			mc.Bridge = func() molecule.Stats { return d.molecule().Stats() }
		} else {
			// So is the local inbox.
			mc.Files = func() (int64, int64) {
				if d.local == nil {
					return 0, 0
				}
				f := d.local.Files()
				return f.Sent, f.Refused
			}
		}
		met = metrics.New(mc)
		onTurn = met.ObserveTurn
		refreshMetrics.Store(met)
		met.SetLoginOwner(d.loginOwner)
		d.met = met
		if d.lastReload != nil {
			met.ObserveReload(d.lastReload.Outcome)
		}
	}
	tmpl := appserver.Config{
		Bin:             bin,
		Env:             env,
		Credential:      cred,
		ConfigOverrides: slices.Concat(d.leanOverrides, cfg.CodexConfig),
		ClientInfo:      protocol.ClientInfo{Name: "codex-warm", Title: "codex-warm supervisor", Version: d.info.Version},
		// Deltas repeat the final text token by token; the daemon only needs completed items.
		// So the local inbox's event stream has no delta events (docs/chat.md says so, and
		// TestE2EMessageEventStream holds the two together).
		OptOutNotifications: []string{protocol.NotifyAgentMessageDelta},
		Policy:              policy,
		Logger:              log,
		// send_file: the agent sends a file back to its chat (package chatfiles); the inbox
		// answers it for each message.
		DynamicTools: []protocol.DynamicToolSpec{chatfiles.Tool()},
	}
	if tokens != nil {
		tmpl.Tokens = tokens
	}
	if cfg.WarmSpares && cfg.Spares > 0 {
		// Closed as runDaemon returns, after Shutdown waited for every child.
		canned, err := cannedmodel.New(cannedmodel.Config{Logger: log})
		if err != nil {
			log.Warn("no canned model for the spares' warm-up; spares are handed out less warm", zap.Error(err))
		} else {
			defer canned.Close()
			tmpl.WarmUpURL = canned.URL()
		}
	}
	if d.mt != nil {
		tmpl.Fork = d.mt.fork
	}
	// Past here nothing can be given back: the state lock, the children, the listeners and the
	// callers are taken.
	if err := r.in.commit(); err != nil {
		return err
	}
	if hdoc != nil {
		d.lock = takeLock(hdoc, cfg.StateDir)
		defer d.lock.Close()
	}
	settings, err := d.openChatSettings(cfg, getenv)
	if err != nil {
		return err
	}
	d.settings = settings
	jobs := &chatjob.Jobs{}
	adopted := adoptChildren(hdoc, tmpl, log)
	// New also runs the boot sweep: children left by a daemon that was killed would otherwise
	// hold memory and their threads forever.
	d.sup, err = supervisor.New(supervisor.Config{
		AppServer:        tmpl,
		Store:            d.store,
		TurnModel:        settings.Turn,
		ForgetSettings:   settings.Forget,
		Jobs:             jobs,
		Retention:        ret,
		RetentionPolicy:  retention.Policy{IdleAfter: cfg.ArchiveIdleAfter, DeleteAfter: cfg.DeleteArchivedAfter, UploadsAfter: cfg.UploadsMaxAge},
		RetentionEvery:   cfg.ArchiveSweepEvery,
		WorkDir:          workDir(cfg.Cwd),
		Thread:           thread,
		StateDir:         cfg.StateDir,
		MaxChildren:      cfg.MaxChildren,
		ThreadsPerChild:  cfg.ThreadsPerChild,
		Spares:           cfg.Spares,
		MemoryBudget:     budget,
		ChildMemoryLimit: cfg.ChildMemoryLimit,
		ChildMaxAge:      cfg.ChildMaxAge,
		ChildMaxTurns:    cfg.ChildMaxTurns,
		// The long-thread policy (compactflags.go).
		CompactAfterTurns: cfg.CompactAfterTurns,
		CompactAboveBytes: cfg.CompactAboveBytes,

		MaxQueuePerKey:   cfg.MaxQueue,
		Busy:             cfg.Busy,
		SlotWait:         cfg.SlotWait,
		MaxSlotWaiters:   cfg.MaxSlotWaiters,
		IdleTTL:          cfg.IdleTTL,
		HandshakeTimeout: cfg.HandshakeTimeout,
		TurnDeadline:     cfg.TurnTimeout,
		PostToolQuiet:    cfg.PostToolTimeout,
		ModelUnreachable: cfg.ModelUnreachableTimeout,
		ModelSilent:      cfg.ModelSilentTimeout,
		ResumeSpacing:    cfg.ResumeSpacing,
		ApprovalTimeout:  cfg.ApprovalTimeout,
		Admit:            d.login.admit,
		OnTurn:           onTurn,
		Logger:           log,
		Adopted:          adopted,
	})
	if err != nil {
		return err
	}

	serveCtx, stopServing := context.WithCancel(ctx)
	defer stopServing()
	var wg sync.WaitGroup
	// The servers that can fail report here; a reload restarts them, so there is room to spare.
	inboxErr := make(chan error, 8)
	if dirs != nil {
		wg.Go(func() { dirs.Run(serveCtx) })
	}
	if tokens != nil {
		// Refreshes ahead of expiry and adoptions of a login written by another process; the
		// children's own refresh requests are answered whether this runs or not (a drain too).
		wg.Add(1)
		go func() {
			defer wg.Done()
			tokens.Run(serveCtx)
		}()
	}

	switch cfg.Inbox {
	case "local":
		var controls chat.Controls
		if cfg.ChatCommands {
			controls = chatControls{d.sup, settings, jobs, cfg.Models.PeerCommands, met}
		}
		h, err := local.New(local.Config{Answerer: d.sup, Controls: controls, Chats: d.sup, Logger: log,
			Token: cfg.InboxToken, AllowedHosts: cfg.InboxAllowHosts, AllowedOrigins: cfg.InboxAllowOrigins,
			BodyTimeout: cfg.InboxBodyTimeout, WriteTimeout: cfg.InboxWriteTimeout, Ready: ready,
			WorkDir: workDir(cfg.Cwd), Secrets: set})
		if err != nil {
			return d.abort(err)
		}
		ln, err := listen(hdoc, handoff.ListenerInbox, "tcp", cfg.Listen)
		if err != nil {
			return d.abort(fmt.Errorf("local inbox: listen on %s: %w", cfg.Listen, err))
		}
		d.info.Listen = ln.Addr().String()
		kl := newKeptListener(ln)
		d.inboxSrv = &server{name: "local inbox", ln: kl, serve: local.LimitConns(kl, cfg.InboxMaxConns, log),
			newSrv: h.Server, errs: inboxErr}
		d.local = h
		if hdoc != nil {
			h.ResumeWaiting(adoptWaiting(hdoc, log))
		}
		d.inboxSrv.start()
		// A reload stops accepting (new connections wait in the socket's backlog for the next
		// image) and lets the requests in flight end: those answered meanwhile, those whose
		// turns the freeze hands over by handing over their connections too (an event stream
		// is waited for).
		var paused chan error
		var cutPause context.CancelFunc
		d.stopIntake = func(ctx context.Context) error {
			paused = make(chan error, 1)
			pctx, cancel := context.WithCancel(ctx)
			cutPause = cancel
			go func() {
				defer cancel()
				paused <- d.inboxSrv.pause(pctx)
			}()
			return nil
		}
		// A request still in flight when a reload is refused (an event stream) goes on with
		// its handler; the paused server stops waiting for it so the inbox serves again now.
		d.cutIntake = func() { cutPause() }
		d.awaitIntake = func(ctx context.Context) error {
			select {
			case err := <-paused:
				return err
			case <-ctx.Done():
				return fmt.Errorf("local inbox: %w", context.Cause(ctx))
			}
		}
		d.startIntake = d.inboxSrv.resume
		log.Info("local inbox listening", zap.String("addr", d.info.Listen), zap.Bool("token", cfg.InboxToken != ""),
			zap.Int("max_conns", cfg.InboxMaxConns), zap.Bool("inherited", hdoc != nil))
	case "molecule":
		mcfg.StateDir = cfg.StateDir
		mcfg.Answerer = d.sup
		if cfg.Busy != supervisor.BusyQueue {
			// A chat's next message must reach the supervisor while its turn runs.
			mcfg.HandOff = d.sup
		}
		if cfg.ChatCommands {
			mcfg.Controls = chatControls{d.sup, settings, jobs, cfg.Models.PeerCommands, met}
		}
		mcfg.Progress = d.sup
		mcfg.Health = d.sup
		mcfg.Resetter = d.sup
		mcfg.ProgressInterval = cfg.ProgressInterval
		mcfg.Limits = d.sup
		mcfg.ParkLimit = cfg.ParkLimit
		mcfg.Logger = log
		mcfg.PollInterval = cfg.PollInterval
		mcfg.EventStream = cfg.EventStream
		mcfg.SafetyPollInterval = cfg.SafetyPollInterval
		mcfg.ToolChips = cfg.ToolChips
		mcfg.HeartbeatInterval = cfg.HeartbeatInterval
		mcfg.RequestTimeout = cfg.PlatformTimeout
		mcfg.PeerTurnTimeout = cfg.PeerTurnTimeout
		mcfg.PeerExchanges = cfg.PeerExchanges
		mcfg.DrainTimeout = cfg.DrainTimeout
		mcfg.WorkDir = cfg.Cwd // uploads are saved where codex works
		if met != nil {
			mcfg.OnPoll = met.ObservePoll
		}
		d.info.Listen = mcfg.PlatformURL
		// A reload stops polling and lets the rows in flight finish and be acknowledged (its
		// drain, bounded by --drain-timeout); the ledger on disk carries the rest to the next
		// image, or to a new inbox when the reload is called off.
		var molWG sync.WaitGroup
		var stopMol context.CancelFunc
		runMol := func() error {
			mol, err := molecule.New(mcfg)
			if err != nil {
				return err
			}
			d.mol.Store(mol)
			var molCtx context.Context
			molCtx, stopMol = context.WithCancel(serveCtx)
			molWG.Go(func() {
				if err := mol.Run(molCtx); err != nil {
					inboxErr <- fmt.Errorf("molecule inbox: %w", err)
				}
			})
			return nil
		}
		if err := runMol(); err != nil {
			return d.abort(err)
		}
		// A reload stops polling; the rows whose turns run are let go by the freeze (their
		// turns cross to the next image, which attaches the rows polled again to them), and
		// then the inbox has stopped.
		d.stopIntake = func(context.Context) error {
			stopMol()
			return nil
		}
		// intakeStopped is closed once the inbox's run that the last awaitIntake waited for has
		// ended. The reload's steps call awaitIntake and startIntake one after the other.
		var intakeStopped chan struct{}
		d.awaitIntake = func(ctx context.Context) error {
			stopped := make(chan struct{})
			intakeStopped = stopped
			go func() {
				molWG.Wait()
				close(stopped)
			}()
			select {
			case <-stopped:
				return nil
			case <-ctx.Done():
				return fmt.Errorf("the molecule inbox did not stop: %w", context.Cause(ctx))
			}
		}
		d.startIntake = func() {
			// A reload called off because the inbox did not stop in time: the inbox is still
			// stopping, and a new run must not begin (molWG.Add) before that run ended and the
			// wait above returned.
			if intakeStopped != nil {
				<-intakeStopped
				intakeStopped = nil
			}
			if err := runMol(); err != nil {
				inboxErr <- fmt.Errorf("molecule inbox: restart after a reload was called off: %w", err)
			}
		}
		wg.Go(func() {
			<-serveCtx.Done()
			molWG.Wait()
		})
	}

	if met != nil {
		err = d.serveMetrics(met, ready, hdoc, inboxErr)
	}
	if err == nil {
		d.control, err = startControl(controlConfig{dir: cfg.StateDir, status: d.status, ready: ready, log: log,
			reload: d.requestReload, stop: d.requestStop, inherited: hdoc, errs: inboxErr, register: d.archiveVerbs})
		if err == nil {
			d.controlSrv = d.control.srv
		}
	}
	if err != nil {
		stopServing()
		for _, srv := range []*server{d.inboxSrv, d.metricsSrv} {
			if srv != nil {
				cctx, cancel := context.WithCancel(context.Background())
				cancel()
				_ = srv.shutdown(cctx)
			}
		}
		wg.Wait()
		return d.abort(err)
	}
	if hdoc != nil {
		log.Info("reload: took over from the previous image", zap.String("from_version", hdoc.WrittenBy),
			zap.String("version", d.info.Version), zap.Int("children", len(adopted)), zap.Int("reloads", hdoc.Reloads))
	}
	log.Info("supervisor running", zap.String("codex_bin", bin), zap.String("state_dir", cfg.StateDir),
		zap.String("inbox", cfg.Inbox), zap.Int("max_children", d.sup.Status().Totals.Cap))
	d.phase.Store(phaseServing)
	r.in.serving()
	d.notify(sd.SdNotifyReady)

	var hupWG sync.WaitGroup
	hupWG.Go(func() { d.watchdog(serveCtx) })
	hupWG.Go(func() {
		for {
			select {
			case <-r.hups:
				if n, err := d.requestReload("SIGHUP"); err != nil {
					log.Warn("SIGHUP: reload refused", zap.Error(err))
				} else {
					log.Info("SIGHUP: reloading", zap.Int("attempt", n))
				}
			case <-serveCtx.Done():
				return
			}
		}
	})

	var runErr error
serve:
	for {
		select {
		case sig := <-sigs:
			log.Info("signal received; draining (send it again to stop at once)", zap.String("signal", sig.String()),
				zap.Duration("drain_timeout", cfg.DrainTimeout))
			break serve
		case runErr = <-inboxErr:
			break serve
		case <-ctx.Done():
			break serve
		case ack := <-d.alive:
			close(ack)
		case <-d.reloadReq:
			d.reload() // returns only when the reload did not happen
		}
	}
	if errors.Is(runErr, molecule.ErrWorkspaceDeleted) {
		// Exit 0: a service manager's Restart=on-failure must not bring back a daemon whose
		// workspace is gone.
		log.Warn("the workspace was deleted on the platform; stopping and exiting 0 so that the service manager does not restart the daemon",
			zap.Error(runErr))
		runErr = nil
	}
	d.phase.Store(phaseDraining)
	d.notify(sd.SdNotifyStopping)
	stopServing()
	hupWG.Wait()

	// The drain ends at the timeout or at a second signal, whichever comes first.
	drainCtx, cutDrain := context.WithTimeout(context.Background(), cfg.DrainTimeout)
	defer cutDrain()
	stopWatch := make(chan struct{})
	var watch sync.WaitGroup
	watch.Add(1)
	go func() {
		defer watch.Done()
		select {
		case sig := <-sigs:
			log.Warn("second signal; interrupting running turns now", zap.String("signal", sig.String()))
			cutDrain()
		case <-stopWatch:
		}
	}()

	// The supervisor's Shutdown runs beside the inbox's: it refuses queued work at once (those
	// messages are not acknowledged, so they come again after a restart) while running turns
	// finish, and its interrupt at the drain deadline is what unblocks the inbox's handlers.
	var supErr error
	watch.Add(1)
	go func() {
		defer watch.Done()
		supErr = d.sup.Shutdown(drainCtx)
	}()
	if d.inboxSrv != nil {
		_ = d.inboxSrv.shutdown(drainCtx)
	}
	if d.local != nil {
		d.local.Wait() // answers on connections a previous image handed over
	}
	wg.Wait()
	close(stopWatch)
	watch.Wait()
	// Scrapes go on through the drain (readyz says draining); the listener goes after it.
	if d.metricsSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = d.metricsSrv.shutdown(ctx)
		cancel()
	}
	if supErr != nil {
		log.Warn("drain cut short", zap.Error(supErr))
	}
	if err := d.control.Close(); err != nil {
		log.Warn("closing control socket", zap.Error(err))
	}
	if err := d.store.Flush(); err != nil {
		log.Error("final sessions write failed", zap.Error(err))
		if runErr == nil {
			runErr = err
		}
	}
	log.Info("supervisor stopped")
	return runErr
}

// molecule is the running Molecule inbox, nil on the local inbox.
func (d *daemon) molecule() *molecule.Inbox { return d.mol.Load() }

// abort stops a daemon whose start failed after the supervisor was created.
func (d *daemon) abort(err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = d.sup.Shutdown(ctx)
	return err
}
