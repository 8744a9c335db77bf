package daemon

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/bridge/chat"
	"github.com/molecule-ai/codex-warm/bridge/local"
	"github.com/molecule-ai/codex-warm/bridge/molecule"
	"github.com/molecule-ai/codex-warm/internal/daemon/handoff"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// startLocal starts the local inbox's server on the listener the previous image handed over, or
// a new one, and gives the reload its intake steps.
func (d *daemon) startLocal(st *startEnv, hdoc *handoff.Doc, clock *drainClock) (intake, error) {
	cfg, log := d.cfg, d.log
	var controls chat.Controls
	if cfg.ChatCommands {
		controls = chatControls{d.sup, d.settings, d.jobs, cfg.Models.PeerCommands, d.met}
	}
	h, err := local.New(local.Config{Answerer: d.sup, Controls: controls, Chats: d.sup, Logger: log,
		Token: cfg.InboxToken, AllowedHosts: cfg.InboxAllowHosts, AllowedOrigins: cfg.InboxAllowOrigins,
		BodyTimeout: cfg.InboxBodyTimeout, WriteTimeout: cfg.InboxWriteTimeout, Ready: st.ready,
		WorkDir: workDir(cfg.Cwd), Secrets: d.set})
	if err != nil {
		return nil, err
	}
	ln, err := listen(hdoc, handoff.ListenerInbox, "tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("local inbox: listen on %s: %w", cfg.Listen, err)
	}
	d.info.Listen = ln.Addr().String()
	kl := newKeptListener(ln)
	d.inboxSrv = &server{name: "local inbox", ln: kl, serve: local.LimitConns(kl, cfg.InboxMaxConns, log),
		newSrv: h.Server, errs: d.failed}
	d.local = h
	if hdoc != nil {
		h.ResumeWaiting(adoptWaiting(hdoc, log))
	}
	d.inboxSrv.start()
	in := &localIntake{srv: d.inboxSrv, inbox: h, drain: clock}
	d.stopIntake, d.cutIntake, d.awaitIntake, d.startIntake = in.stop, in.cut, in.await, in.srv.resume
	log.Info("local inbox listening", zap.String("addr", d.info.Listen), zap.Bool("token", cfg.InboxToken != ""),
		zap.Int("max_conns", cfg.InboxMaxConns), zap.Bool("inherited", hdoc != nil))
	return in, nil
}

// localIntake is the local inbox's server as the daemon runs it. A reload stops accepting (new
// connections wait in the socket's backlog for the next image) and lets the requests in flight
// end: those answered meanwhile, those whose turns the freeze hands over by handing over their
// connections too (an event stream is waited for). The reload's steps run on the main loop, one
// after the other.
type localIntake struct {
	srv   *server
	inbox *local.Inbox
	drain *drainClock

	paused   chan error         // the last pause's outcome
	cutPause context.CancelFunc // ends the last pause's wait for the requests in flight
	pauses   sync.WaitGroup
}

// stop pauses the server without waiting; await waits for the pause.
func (l *localIntake) stop(ctx context.Context) error {
	paused := make(chan error, 1)
	pctx, cancel := context.WithCancel(ctx)
	l.paused, l.cutPause = paused, cancel
	l.pauses.Go(func() {
		defer cancel()
		paused <- l.srv.pause(pctx)
	})
	return nil
}

// cut lets a pause end without its requests still in flight when a reload is refused (an event
// stream goes on with its handler), so that the inbox serves again now.
func (l *localIntake) cut() { l.cutPause() }

// await waits, until ctx is done, for the pause stop began.
func (l *localIntake) await(ctx context.Context) error {
	select {
	case err := <-l.paused:
		return err
	case <-ctx.Done():
		return fmt.Errorf("local inbox: %w", context.Cause(ctx))
	}
}

// Run serves until ctx is done, then shuts the server down within the drain's bound and waits
// for the answers on connections a previous image handed over.
func (l *localIntake) Run(ctx context.Context) error {
	<-ctx.Done()
	_ = l.srv.shutdown(l.drain.start())
	l.inbox.Wait()
	l.pauses.Wait()
	return nil
}

// halt closes the server at once: the start failed.
func (l *localIntake) halt() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = l.srv.shutdown(ctx)
}

// startMolecule starts the Molecule inbox and gives the reload its intake steps.
func (d *daemon) startMolecule(st *startEnv) (intake, error) {
	cfg := d.cfg
	mcfg := st.mcfg
	mcfg.StateDir = cfg.StateDir
	mcfg.Answerer = d.sup
	if cfg.Busy != supervisor.BusyQueue {
		// A chat's next message must reach the supervisor while its turn runs.
		mcfg.HandOff = d.sup
	}
	if cfg.ChatCommands {
		mcfg.Controls = chatControls{d.sup, d.settings, d.jobs, cfg.Models.PeerCommands, d.met}
	}
	mcfg.Progress = d.sup
	mcfg.Health = d.sup
	mcfg.Resetter = d.sup
	mcfg.ProgressInterval = cfg.ProgressInterval
	mcfg.Limits = d.sup
	mcfg.ParkLimit = cfg.ParkLimit
	mcfg.Logger = d.log
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
	if d.met != nil {
		mcfg.OnPoll = d.met.ObservePoll
	}
	d.info.Listen = mcfg.PlatformURL
	in := newMoleculeIntake(mcfg, d.failed)
	if err := in.run(); err != nil {
		in.halt()
		return nil, err
	}
	d.molIn = in
	d.stopIntake, d.awaitIntake, d.startIntake = in.stop, in.await, in.restart
	return in, nil
}

// moleculeIntake is the Molecule inbox as the daemon runs it: one run of an Inbox at a time. A
// reload stops polling and lets the rows in flight finish and be acknowledged (its drain,
// bounded by --drain-timeout); the ledger on disk carries the rest to the next image, or to a
// new Inbox when the reload is called off. The reload's steps run on the main loop, one after
// the other.
type moleculeIntake struct {
	cfg    molecule.Config
	failed chan<- error
	cur    atomic.Pointer[molecule.Inbox] // replaced when a reload is called off

	ctx     context.Context // every run's parent
	stopAll context.CancelFunc
	stopRun context.CancelFunc // the current run's
	runs    sync.WaitGroup
	waits   sync.WaitGroup // await's waits for the runs
	// stopped is closed once the run the last await waited for has ended.
	stopped chan struct{}
}

func newMoleculeIntake(cfg molecule.Config, failed chan<- error) *moleculeIntake {
	ctx, cancel := context.WithCancel(context.Background())
	return &moleculeIntake{cfg: cfg, failed: failed, ctx: ctx, stopAll: cancel}
}

// current is the running Inbox.
func (m *moleculeIntake) current() *molecule.Inbox { return m.cur.Load() }

// run starts a run of a new Inbox; its failure goes to the main loop.
func (m *moleculeIntake) run() error {
	mol, err := molecule.New(m.cfg)
	if err != nil {
		return err
	}
	m.cur.Store(mol)
	ctx, cancel := context.WithCancel(m.ctx)
	m.stopRun = cancel
	m.runs.Go(func() {
		if err := mol.Run(ctx); err != nil {
			m.failed <- fmt.Errorf("molecule inbox: %w", err)
		}
	})
	return nil
}

// stop stops polling; the rows whose turns run are let go by the freeze (their turns cross to
// the next image, which attaches the rows polled again to them), and then the inbox has
// stopped.
func (m *moleculeIntake) stop(context.Context) error {
	m.stopRun()
	return nil
}

// await waits, until ctx is done, for the run stop ended.
func (m *moleculeIntake) await(ctx context.Context) error {
	stopped := make(chan struct{})
	m.stopped = stopped
	m.waits.Go(func() {
		m.runs.Wait()
		close(stopped)
	})
	select {
	case <-stopped:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the molecule inbox did not stop: %w", context.Cause(ctx))
	}
}

// restart runs a new Inbox after a reload was called off.
func (m *moleculeIntake) restart() {
	// A reload called off because the inbox did not stop in time: the inbox is still stopping,
	// and a new run must not begin (runs.Go) before that run ended and the wait above returned.
	if m.stopped != nil {
		<-m.stopped
		m.stopped = nil
	}
	if err := m.run(); err != nil {
		m.failed <- fmt.Errorf("molecule inbox: restart after a reload was called off: %w", err)
	}
}

// Run lets the inbox run until ctx is done, then stops it and waits for its drain.
func (m *moleculeIntake) Run(ctx context.Context) error {
	<-ctx.Done()
	m.halt()
	return nil
}

// halt stops the inbox and waits for it.
func (m *moleculeIntake) halt() {
	m.stopAll()
	m.runs.Wait()
	m.waits.Wait()
}
