package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/bridge/molecule"
	"github.com/molecule-ai/codex-warm/internal/cannedmodel"
	"github.com/molecule-ai/codex-warm/internal/chatfiles"
	"github.com/molecule-ai/codex-warm/internal/daemon/handoff"
	"github.com/molecule-ai/codex-warm/internal/metrics"
	"github.com/molecule-ai/codex-warm/internal/protocol"
	"github.com/molecule-ai/codex-warm/internal/retention"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// newMetrics builds the metrics when --metrics-listen is set, and returns the sampler of the
// folders' sizes they show (nil without metrics).
func (d *daemon) newMetrics(st *startEnv) *metrics.DirSampler {
	cfg, log := d.cfg, d.log
	if cfg.MetricsListen == "" {
		return nil
	}
	// Walks CODEX_HOME and the state dir for codex_warm_dir_bytes.
	dirs := metrics.NewDirSampler(metrics.DirSamplerConfig{Logger: log,
		Dirs: map[string]string{metrics.DirCodexHome: st.codexHome, metrics.DirState: cfg.StateDir}})
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
	met := metrics.New(mc)
	st.refreshMetrics.Store(met)
	met.SetLoginOwner(d.loginOwner)
	d.met = met
	if d.lastReload != nil && d.lastReload.Outcome != reloadStarting { // starting: counted once it serves
		met.ObserveReload(d.lastReload.Outcome)
	}
	return dirs
}

// childTemplate is the configuration every codex child starts with, and the options of the
// threads the supervisor starts in them.
func (d *daemon) childTemplate(st *startEnv, held *closers) (appserver.Config, appserver.ThreadOptions) {
	cfg, log := d.cfg, d.log
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
	tmpl := appserver.Config{
		Bin:             st.bin,
		Env:             st.env,
		Credential:      st.cred,
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
	if d.tokens != nil {
		tmpl.Tokens = d.tokens
	}
	if cfg.WarmSpares && cfg.Spares > 0 {
		// Closed as runDaemon returns, after Shutdown waited for every child.
		canned, err := cannedmodel.New(cannedmodel.Config{Logger: log})
		if err != nil {
			log.Warn("no canned model for the spares' warm-up; spares are handed out less warm", zap.Error(err))
		} else {
			held.add(canned.Close)
			tmpl.WarmUpURL = canned.URL()
		}
	}
	if d.mt != nil {
		tmpl.Fork = d.mt.fork
	}
	return tmpl, thread
}

// newSupervisor builds the pool on tmpl. New also runs the boot sweep: children left by a
// daemon that was killed would otherwise hold memory and their threads forever.
func (d *daemon) newSupervisor(tmpl appserver.Config, thread appserver.ThreadOptions, ret *retention.Log, budget int64,
	adopted []supervisor.AdoptedChild) (*supervisor.Supervisor, error) {
	cfg := d.cfg
	var onTurn func(supervisor.TurnEvent)
	if d.met != nil {
		onTurn = d.met.ObserveTurn
	}
	return supervisor.New(supervisor.Config{
		AppServer:        tmpl,
		Store:            d.store,
		TurnModel:        d.settings.Turn,
		ForgetSettings:   d.settings.Forget,
		Jobs:             d.jobs,
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
		Logger:           d.log,
		Adopted:          adopted,
	})
}

// intake is the component that takes the daemon's messages in: the local inbox's server or the
// Molecule inbox. Besides Run, halt stops it at once when the start fails before it ran.
type intake interface {
	component
	halt()
}

// assemble starts the inbox, the metrics listener and the control socket, in that order (each
// may need the one before it), and returns the daemon's components in their shutdown order. The
// listeners serve from here on, before the daemon says it is ready. On an error what started is
// stopped again.
func (d *daemon) assemble(st *startEnv, dirs *metrics.DirSampler, hdoc *handoff.Doc) ([]stage, error) {
	// The servers that can fail report here; a reload restarts them, so there is room to spare.
	d.failed = make(chan error, 8)
	clock := newDrainClock(d.cfg.DrainTimeout, d.sigs, d.log)
	var in intake
	var err error
	switch d.cfg.Inbox {
	case "local":
		in, err = d.startLocal(st, hdoc, clock)
	case "molecule":
		in, err = d.startMolecule(st)
	default: // ParseFlags refuses any other
		err = fmt.Errorf("--inbox %q: want molecule or local", d.cfg.Inbox)
	}
	if err != nil {
		return nil, err
	}
	if d.met != nil {
		err = d.serveMetrics(d.met, st.ready, hdoc, d.failed)
	}
	if err == nil {
		d.control, err = startControl(controlConfig{dir: d.cfg.StateDir, status: d.status, ready: st.ready, log: d.log,
			reload: d.requestReload, stop: d.requestStop, inherited: hdoc, errs: d.failed, register: d.archiveVerbs})
		if err == nil {
			d.controlSrv = d.control.srv
		}
	}
	if err != nil {
		in.halt()
		if d.metricsSrv != nil {
			cctx, cancel := context.WithCancel(context.Background())
			cancel()
			_ = d.metricsSrv.shutdown(cctx)
		}
		return nil, err
	}
	return d.shutdownOrder(in, clock, dirs), nil
}

// shutdownOrder is the daemon's components, in the order the daemon stops them: the one place
// that order is written. Every component starts at once (the listeners already serve); the
// first to return, the main loop at a stop signal, begins the shutdown (runStages).
func (d *daemon) shutdownOrder(in intake, clock *drainClock, dirs *metrics.DirSampler) []stage {
	drain := []component{runFunc(func(ctx context.Context) error { return d.drainPool(ctx, clock) }), in}
	if d.tokens != nil {
		// Refreshes ahead of expiry and adoptions of a login written by another process; the
		// children's own refresh requests are answered whether this runs or not (a drain too).
		drain = append(drain, runFunc(func(ctx context.Context) error { d.tokens.Run(ctx); <-ctx.Done(); return nil }))
	}
	if dirs != nil {
		drain = append(drain, runFunc(func(ctx context.Context) error { dirs.Run(ctx); return nil }))
	}
	return []stage{
		// 1. The main loop (signals, reloads, the watchdog's checks): a stop signal, a failed
		// server or ctx ends it, and the daemon then says it drains.
		{"main loop", []component{runFunc(d.serve)}},
		// 2. What talks to the main loop: the service manager's watchdog and SIGHUP.
		{"watchdog and SIGHUP", []component{runFunc(d.runWatchdog), runFunc(d.runHups)}},
		// 3. The drain, bounded by --drain-timeout or a second signal (the drain clock): the
		// pool refuses queued work at once (those messages are not acknowledged, so they come
		// again after a restart) while running turns finish beside the inbox's own drain; the
		// pool's interrupt at the bound is what unblocks the inbox's handlers. The token
		// refresher and the folder sampler stop with them.
		{"drain", drain},
		// 4. The second signal is watched until the drain ended.
		{"drain clock", []component{clock}},
		// 5. The metrics listener: scrapes go on through the drain (readyz says draining).
		{"metrics", []component{runFunc(d.stopMetrics)}},
		// 6. The control socket: status answers to the end.
		{"control socket", []component{runFunc(d.stopControl)}},
		// 7. sessions.json, written once nothing changes it any more.
		{"sessions", []component{runFunc(d.flushSessions)}},
	}
}

// serve is the daemon's main loop: it answers the watchdog's checks and runs the reloads asked
// for, until a stop signal, a failed server or inbox, or ctx ends it. The daemon then drains:
// serve says so (readiness, the service manager) before it returns.
func (d *daemon) serve(ctx context.Context) error {
	var runErr error
loop:
	for {
		select {
		case sig := <-d.sigs:
			d.log.Info("signal received; draining (send it again to stop at once)", zap.String("signal", sig.String()),
				zap.Duration("drain_timeout", d.cfg.DrainTimeout))
			break loop
		case runErr = <-d.failed:
			break loop
		case <-ctx.Done():
			break loop
		case ack := <-d.alive:
			close(ack)
		case <-d.reloadReq:
			d.reload() // returns only when the reload did not happen
		}
	}
	if errors.Is(runErr, molecule.ErrWorkspaceDeleted) {
		// Exit 0: a service manager's Restart=on-failure must not bring back a daemon whose
		// workspace is gone.
		d.log.Warn("the workspace was deleted on the platform; stopping and exiting 0 so that the service manager does not restart the daemon",
			zap.Error(runErr))
		runErr = nil
	}
	d.phase.Store(phaseDraining)
	d.notify(sd.SdNotifyStopping)
	return runErr
}

// runWatchdog pings the service manager's watchdog (sdnotify.go) until ctx is done.
func (d *daemon) runWatchdog(ctx context.Context) error {
	d.watchdog(ctx) // returns at once when the service manager set no watchdog
	<-ctx.Done()
	return nil
}

// runHups asks for a reload at each SIGHUP until ctx is done.
func (d *daemon) runHups(ctx context.Context) error {
	for {
		select {
		case <-d.hups:
			if n, err := d.requestReload("SIGHUP"); err != nil {
				d.log.Warn("SIGHUP: reload refused", zap.Error(err))
			} else {
				d.log.Info("SIGHUP: reloading", zap.Int("attempt", n))
			}
		case <-ctx.Done():
			return nil
		}
	}
}

// drainPool shuts the pool down when ctx is done, within the drain's bound; it returns once
// every codex child was waited for.
func (d *daemon) drainPool(ctx context.Context, clock *drainClock) error {
	<-ctx.Done()
	if err := d.sup.Shutdown(clock.start()); err != nil {
		d.log.Warn("drain cut short", zap.Error(err))
	}
	return nil
}

// stopMetrics closes the metrics listener when ctx is done.
func (d *daemon) stopMetrics(ctx context.Context) error {
	<-ctx.Done()
	if d.metricsSrv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = d.metricsSrv.shutdown(sctx)
	}
	return nil
}

// stopControl closes the control socket when ctx is done.
func (d *daemon) stopControl(ctx context.Context) error {
	<-ctx.Done()
	if err := d.control.Close(); err != nil {
		d.log.Warn("closing control socket", zap.Error(err))
	}
	return nil
}

// flushSessions writes sessions.json a last time when ctx is done.
func (d *daemon) flushSessions(ctx context.Context) error {
	<-ctx.Done()
	if err := d.store.Flush(); err != nil {
		d.log.Error("final sessions write failed", zap.Error(err))
		return fmt.Errorf("final sessions write: %w", err)
	}
	return nil
}
