package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/bridge/local"
	"github.com/molecule-ai/codex-warm/internal/codexauth"
	"github.com/molecule-ai/codex-warm/internal/control"
	"github.com/molecule-ai/codex-warm/internal/daemon/handoff"
	"github.com/molecule-ai/codex-warm/internal/daemon/reload"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// ReloadPreflightCmd is the hidden subcommand a daemon runs its successor with before a reload.
const ReloadPreflightCmd = "reload-preflight"

// preflightTimeout bounds the successor's preflight run.
const preflightTimeout = 15 * time.Second

// Reload outcomes, in status and metrics.
const (
	reloadOK      = string(reload.OK)
	reloadRefused = string(reload.Refused)
	reloadFailed  = string(reload.Failed)
	reloadRunning = string(reload.Running)
	// reloadStarting is this image's outcome of the reload that started it until it serves.
	reloadStarting = string(reload.Starting)
)

// preflightBinary runs path with the preflight subcommand, the daemon's run flags and secrets
// (ReloadPreflight), and says why it cannot take over a handoff of version need.
func preflightBinary(ctx context.Context, path string, secrets map[string]string, need int) (handoff.Preflight, error) {
	ctx, cancel := context.WithTimeout(ctx, preflightTimeout)
	defer cancel()
	var out, errOut bytes.Buffer
	args := []string{ReloadPreflightCmd}
	if len(os.Args) > 1 && os.Args[1] == "run" {
		args = append(args, os.Args[2:]...)
	}
	in, err := json.Marshal(secrets)
	if err != nil {
		return handoff.Preflight{}, err
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdin = bytes.NewReader(in)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		return handoff.Preflight{}, fmt.Errorf("preflight of %s: %w; stderr: %s", path, err, capBytes(bytes.TrimSpace(errOut.Bytes()), 500))
	}
	p, err := handoff.CheckPreflight(bytes.TrimSpace(out.Bytes()), need)
	if err != nil {
		return p, fmt.Errorf("preflight of %s: %w", path, err)
	}
	return p, nil
}

// errReloadBusy refuses a reload asked for while one runs.
var errReloadBusy = errors.New("a reload is already in progress")

// requestReload starts a reload unless one runs; the daemon's main loop runs it. It returns
// the attempt's number.
func (d *daemon) requestReload(trigger string) (int, error) {
	if d.mt == nil {
		return 0, errors.New("this daemon cannot reload in place (it does not own its main thread)")
	}
	if phase := d.phase.Load(); phase != phaseServing {
		return 0, d.notServing(phase)
	}
	if !d.reloading.CompareAndSwap(false, true) {
		return 0, errReloadBusy
	}
	d.reloadMu.Lock()
	d.attempts++
	n := d.attempts
	d.lastReload = &control.ReloadInfo{Attempt: n, Trigger: trigger, At: time.Now().UTC(), Outcome: reloadRunning, From: d.info.Version}
	d.reloadMu.Unlock()
	d.notifyReloading()
	d.reloadReq <- trigger // buffered: at most one runs
	return n, nil
}

// notServing is why a daemon in phase, not serving, refuses a reload. An image a reload
// started is that reload still under way: the control socket it took over answers before it
// serves, the requests made during the exec first (they waited in the socket's backlog).
func (d *daemon) notServing(phase int32) error {
	switch {
	case phase == phaseDraining:
		return errors.New("the daemon is stopping")
	case d.givenBack:
		return fmt.Errorf("%w: the new binary could not take over and the previous image is starting again; try again once it serves", errReloadBusy)
	case d.reloaded:
		return fmt.Errorf("%w: the new image is starting; try again once it serves", errReloadBusy)
	}
	return errors.New("the daemon is starting; try again once it serves")
}

// endReload records a reload's outcome; the daemon serves on.
func (d *daemon) endReload(outcome string, err error) {
	d.reloadMu.Lock()
	if d.lastReload != nil {
		d.lastReload.Outcome = outcome
		if err != nil {
			d.lastReload.Error = err.Error()
		}
	}
	d.reloadMu.Unlock()
	if d.met != nil {
		d.met.ObserveReload(outcome)
	}
	d.log.Error("reload did not happen; the daemon serves on with everything it had",
		zap.String("outcome", outcome), zap.Error(err))
	d.reloading.Store(false)
	d.notify(sd.SdNotifyReady)
}

// reloadInfo is a copy of the last reload, nil before the first.
func (d *daemon) reloadInfo() *control.ReloadInfo {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	if d.lastReload == nil {
		return nil
	}
	r := *d.lastReload
	return &r
}

// reload replaces the daemon's image with the binary now at d.exe, keeping the pid, the
// listeners, the warm children and the turns they run: package reload runs the sequence on the
// steps below. It returns only when the reload did not happen: the daemon then serves on as
// before (a stop that called it off stays in d.sigs, so the main loop drains next), and the
// outcome is recorded.
func (d *daemon) reload() {
	log := d.log
	var children []supervisor.HandedChild
	var waiting []local.Waiting
	var doc handoff.Doc
	steps := reload.Steps{
		Preflight: func(ctx context.Context) (string, error) {
			log.Info("reload: checking the new binary", zap.String("executable", d.exe))
			// A daemon that shares children hands them over in a version 3 document: a binary
			// that knows no shared children is refused here, before anything stops.
			need := handoff.VersionUnshared
			if d.cfg.ThreadsPerChild > 1 {
				need = handoff.Version
			}
			pf, err := preflightBinary(ctx, d.exe, d.secrets, need)
			if err != nil {
				return "", err
			}
			log.Info("reload: new binary answers; quiescing", zap.String("new_version", pf.Version),
				zap.Ints("handoff_readable", pf.Readable), zap.Duration("bound", d.cfg.DrainTimeout))
			d.reloadMu.Lock()
			d.lastReload.To = pf.Version
			d.reloadMu.Unlock()
			return pf.Version, nil
		},
		Bound:       d.cfg.DrainTimeout,
		StopIntake:  d.stopIntake,
		StartIntake: d.startIntake,
		Freeze: func(ctx context.Context) error {
			var err error
			children, err = d.sup.Freeze(ctx)
			return err
		},
		Thaw:         d.sup.Thaw,
		CutIntake:    d.cutIntake,
		AwaitIntake:  d.awaitIntake,
		PauseServers: d.pauseServers,
		StopPending:  func() bool { return len(d.sigs) > 0 },
		Prepare: func() error {
			if err := d.store.Flush(); err != nil {
				return fmt.Errorf("write sessions before the reload: %w", err)
			}
			var err error
			doc, err = d.handoffDoc(children, waiting)
			return err
		},
		Exec: func() error { return d.execInto(doc) },
	}
	if d.tokens != nil {
		steps.Settle = func(ctx context.Context) (func(), error) {
			log.Info("reload: holding the ChatGPT login (a refresh in flight is awaited)")
			release, err := d.tokens.Hold(ctx)
			if err != nil {
				return nil, fmt.Errorf("the ChatGPT login cannot cross now: %w", err)
			}
			return release, nil
		}
	}
	if d.local != nil {
		steps.TakeWaiting = func(ctx context.Context) error {
			var err error
			waiting, err = d.local.TakeWaiting(ctx)
			return err
		}
		steps.GiveWaiting = func() {
			// The callers whose connections were to cross get their answers from this image.
			more, _ := d.local.TakeWaiting(context.Background())
			d.local.ResumeWaiting(append(waiting, more...))
		}
	}
	res := reload.Run(steps)
	d.endReload(string(res.Outcome), res.Err)
}

// pauseServers pauses the metrics listener and the control socket, last (status answers all
// along), and returns what resumes them.
func (d *daemon) pauseServers() func() {
	var paused []*server
	for _, s := range []*server{d.metricsSrv, d.controlSrv} {
		if s == nil {
			continue
		}
		sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := s.pause(sctx)
		scancel()
		if err != nil {
			d.log.Warn("reload: a request in flight is cut by the exec", zap.Error(err))
		}
		paused = append(paused, s)
	}
	return func() {
		for _, s := range paused {
			s.resume()
		}
	}
}

// stopDuringExec is a stop signal found at the exec's last moment: the reload is called off and
// the daemon drains.
type stopDuringExec struct{ n int }

func (e *stopDuringExec) Error() string {
	return fmt.Sprintf("%d stop signal(s) received at the last moment before the exec", e.n)
}

func (e *stopDuringExec) Unwrap() error { return reload.ErrStop }

// quietSignals prepares the exec: SIGHUP ignored, so that the reloads asked for across it are
// coalesced (an ignored signal stays ignored through execve, and Go keeps an inherited ignore of
// SIGHUP until the next image's Notify), and SIGTERM and SIGINT no longer caught, so that one
// sent from now on ends this image by the default action (not caught by a handler the exec
// discards: lost). signal.Stop returns once every signal delivered before it is in d.sigs: a
// stop found there after it calls the reload off (*stopDuringExec). loudSignals undoes it.
func (d *daemon) quietSignals() error {
	signal.Ignore(syscall.SIGHUP)
	signal.Stop(d.sigs)
	if n := len(d.sigs); n > 0 {
		d.loudSignals()
		return &stopDuringExec{n: n}
	}
	return nil
}

// loudSignals catches the daemon's signals again after an exec that did not happen.
func (d *daemon) loudSignals() {
	signal.Notify(d.hups, syscall.SIGHUP)
	signal.Notify(d.sigs, syscall.SIGTERM, syscall.SIGINT)
}

// handoffDoc describes what the next image takes over.
func (d *daemon) handoffDoc(children []supervisor.HandedChild, waiting []local.Waiting) (handoff.Doc, error) {
	d.reloadMu.Lock()
	attempt := d.attempts
	trigger := d.lastReload.Trigger
	d.reloadMu.Unlock()
	doc := handoff.Doc{
		WrittenBy: d.info.Version, Written: time.Now().UTC(), Started: d.info.Started, Reloads: d.info.Reloads + 1,
		Attempts: attempt, Trigger: trigger, Executable: d.exe, Args: os.Args, Env: d.secrets,
		TakeoverTimeoutMS: d.cfg.TakeoverTimeout.Milliseconds(), Secrets: exportSecrets(d.set),
	}
	fd, err := d.lock.fd()
	if err != nil {
		return doc, err
	}
	doc.LockFD = fd
	if d.tokens != nil {
		if doc.ChatGPT, err = json.Marshal(d.tokens.Carry()); err != nil {
			return doc, fmt.Errorf("the ChatGPT login: %w", err)
		}
	}
	for _, l := range []struct {
		name string
		s    *server
	}{{handoff.ListenerInbox, d.inboxSrv}, {handoff.ListenerMetrics, d.metricsSrv}, {handoff.ListenerControl, d.controlSrv}} {
		if l.s == nil {
			continue
		}
		fd, err := l.s.ln.fd()
		if err != nil {
			return doc, fmt.Errorf("%s listener: %w", l.name, err)
		}
		doc.Listeners = append(doc.Listeners, handoff.Listener{Name: l.name, FD: fd, Addr: l.s.ln.Addr().String()})
	}
	for _, c := range children {
		h := c.Handover
		hc := handoff.Child{ChatKey: c.ChatKey, ThreadID: c.ThreadID, PID: h.PID,
			Started: c.Started, Turns: c.Turns, Stdin: rawFD(h.Stdin), Stdout: rawFD(h.Stdout),
			Stderr: rawFD(h.Stderr), Pending: h.Pending}
		// The client's turns by thread: one (Turn), or a shared child's several (Turns).
		states := make(map[string]*appserver.TurnHandover)
		if h.Turn != nil {
			states[h.Turn.ThreadID] = h.Turn
		}
		for _, th := range h.Turns {
			states[th.ThreadID] = th
		}
		turnOf := func(chat, thread string, t *supervisor.HandedTurn) (*handoff.Turn, error) {
			st := states[thread]
			if t == nil || st == nil {
				return nil, nil
			}
			state, err := json.Marshal(st)
			if err != nil {
				return nil, fmt.Errorf("chat %s: running turn: %w", chat, err)
			}
			return &handoff.Turn{MessageID: t.MessageID, AskApprovalsOf: t.AskApprovalsOf,
				Approvals: t.Approvals, DeadlineLeftMS: t.DeadlineLeft.Milliseconds(), State: state}, nil
		}
		var err error
		if hc.Turn, err = turnOf(c.ChatKey, c.ThreadID, c.Turn); err != nil {
			return doc, err
		}
		for _, th := range c.Shared {
			ht := handoff.Thread{ChatKey: th.ChatKey, ThreadID: th.ThreadID, Started: th.Started, Turns: th.Turns}
			if ht.Turn, err = turnOf(th.ChatKey, th.ThreadID, th.Turn); err != nil {
				return doc, err
			}
			hc.Threads = append(hc.Threads, ht)
		}
		doc.Children = append(doc.Children, hc)
	}
	for _, w := range waiting {
		sc, ok := w.Conn.(syscall.Conn)
		if !ok {
			return doc, fmt.Errorf("chat %s: a waiting caller's connection has no descriptor", w.ChatKey)
		}
		rc, err := sc.SyscallConn()
		if err != nil {
			return doc, fmt.Errorf("chat %s: a waiting caller's connection: %w", w.ChatKey, err)
		}
		fd := -1
		_ = rc.Control(func(u uintptr) { fd = int(u) })
		doc.Waiting = append(doc.Waiting, handoff.Waiting{FD: fd, ChatKey: w.ChatKey, MessageID: w.MessageID, Text: w.Text, Seq: w.Seq})
	}
	return doc, nil
}

// adoptWaiting turns the handed-over connections of the local inbox's waiting callers back
// into connections; one that cannot be is closed (its caller sees the connection end).
func adoptWaiting(doc *handoff.Doc, log *zap.Logger) []local.Waiting {
	var out []local.Waiting
	for _, w := range doc.Waiting {
		handoff.Reclaim(w.FD)
		f := os.NewFile(uintptr(w.FD), "waiting-caller")
		conn, err := net.FileConn(f)
		_ = f.Close() // FileConn holds a duplicate
		if err != nil {
			log.Error("reload: cannot take over a waiting caller's connection", zap.String("chat_key", w.ChatKey), zap.Error(err))
			continue
		}
		out = append(out, local.Waiting{Conn: conn, ChatKey: w.ChatKey, MessageID: w.MessageID, Text: w.Text, Seq: w.Seq})
	}
	return out
}

// rawFD is f's descriptor. Unlike File.Fd it leaves the descriptor non-blocking, so that the
// pipe keeps its deadlines here (a reload called off) and is pollable in the next image.
func rawFD(f *os.File) int {
	fd := -1
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(u uintptr) { fd = int(u) })
	}
	return fd
}

// execInto writes doc and re-executes d.exe on the main thread. It returns only on failure,
// with every descriptor close-on-exec again.
func (d *daemon) execInto(doc handoff.Doc) error {
	f, err := handoff.Write(doc)
	if err != nil {
		return err
	}
	defer f.Close()
	fds := append(doc.FDs(), int(f.Fd()))
	if err := handoff.Inherit(fds...); err != nil {
		handoff.Reclaim(fds...)
		return err
	}
	env := append(os.Environ(), fmt.Sprintf("%s=%d", handoff.EnvFD, f.Fd()))
	if d.self != nil {
		// The next image gives everything back to this file if it cannot take over.
		self := rawFD(d.self)
		fds = append(fds, self)
		if err := handoff.Inherit(self); err != nil {
			handoff.Reclaim(fds...)
			return err
		}
		env = append(env, fmt.Sprintf("%s=%d", handoff.EnvFallbackFD, self))
	}
	d.log.Info("reload: handing over and re-executing", zap.String("executable", d.exe),
		zap.Int("children", len(doc.Children)), zap.Int("listeners", len(doc.Listeners)))
	_ = d.log.Sync()
	if err := d.quietSignals(); err != nil {
		handoff.Reclaim(fds...)
		return err
	}
	// From here until the next image's first handler, a stop signal ends the daemon: the next
	// image logs how long that lasted.
	env = append(env, fmt.Sprintf("%s=%d", handoff.EnvQuietAt, time.Now().UnixNano()))
	var execErr error
	d.mt.do(func() { execErr = syscall.Exec(d.exe, os.Args, env) })
	d.loudSignals()
	handoff.Reclaim(fds...)
	return fmt.Errorf("exec %s: %w", d.exe, execErr)
}

// adoptChildren turns the handed-over children back into clients; one that cannot be adopted
// is killed with its process group (the boot sweep's way), its descriptors closed.
func adoptChildren(doc *handoff.Doc, tmpl appserver.Config, log *zap.Logger) []supervisor.AdoptedChild {
	if doc == nil {
		return nil
	}
	var out []supervisor.AdoptedChild
	for _, c := range doc.Children {
		handoff.Reclaim(c.Stdin, c.Stdout, c.Stderr)
		h := appserver.Handover{PID: c.PID, Pending: c.Pending,
			Stdin:  os.NewFile(uintptr(c.Stdin), fmt.Sprintf("codex-%d-stdin", c.PID)),
			Stdout: os.NewFile(uintptr(c.Stdout), fmt.Sprintf("codex-%d-stdout", c.PID)),
			Stderr: os.NewFile(uintptr(c.Stderr), fmt.Sprintf("codex-%d-stderr", c.PID))}
		// A child in the middle of a turn nobody follows would take the chat's next
		// turn/start into that turn: it is not adopted without it.
		turn, th, err := adoptedTurn(c.Turn)
		var shared []supervisor.SharedThread
		if err == nil && len(c.Threads) > 0 {
			// A shared child: its turns go to the client together (Turns), one per thread.
			if th != nil {
				h.Turns = append(h.Turns, th)
			}
			for _, t := range c.Threads {
				st := supervisor.SharedThread{ChatKey: t.ChatKey, ThreadID: t.ThreadID, Started: t.Started, Turns: t.Turns}
				var sth *appserver.TurnHandover
				if st.Turn, sth, err = adoptedTurn(t.Turn); err != nil {
					break
				}
				if sth != nil {
					h.Turns = append(h.Turns, sth)
				}
				shared = append(shared, st)
			}
		} else if th != nil {
			h.Turn = th
		}
		var cl *appserver.Client
		if err == nil {
			cfg := tmpl
			cfg.Logger = log.With(zap.String("chat_key", c.ChatKey))
			if len(c.Threads) > 0 {
				cfg.Logger = log // a shared child serves several chats
			}
			cl, err = appserver.Adopt(cfg, h)
		}
		if err != nil {
			log.Error("reload: cannot adopt a handed-over child; killing it", zap.String("chat_key", c.ChatKey),
				zap.Int("pid", c.PID), zap.Error(err))
			_ = h.Stdin.Close()
			_ = h.Stdout.Close()
			_ = h.Stderr.Close()
			_ = syscall.Kill(-c.PID, syscall.SIGKILL)
			continue
		}
		out = append(out, supervisor.AdoptedChild{ChatKey: c.ChatKey, ThreadID: c.ThreadID, Started: c.Started,
			Turns: c.Turns, Child: cl, Turn: turn, Shared: shared})
	}
	return out
}

// adoptedTurn decodes a running turn of the handoff: what the pool and the client go on with.
func adoptedTurn(t *handoff.Turn) (*supervisor.HandedTurn, *appserver.TurnHandover, error) {
	if t == nil {
		return nil, nil, nil
	}
	var th appserver.TurnHandover
	if err := json.Unmarshal(t.State, &th); err != nil {
		return nil, nil, fmt.Errorf("its running turn is unreadable: %w", err)
	}
	return &supervisor.HandedTurn{MessageID: t.MessageID, AskApprovalsOf: t.AskApprovalsOf,
		Approvals: t.Approvals, DeadlineLeft: time.Duration(t.DeadlineLeftMS) * time.Millisecond,
		Started: th.Started}, &th, nil
}

// incoming is what a reloaded image received from the previous one.
type incoming struct {
	doc *handoff.Doc // nil when it could not be read
	raw []byte       // the handoff as read, kept for a give-back until the image takes over
	// fallback is the previous image's executable (nil: none); givenBack is the reason a next
	// image gave the handoff back, when this image is the previous binary again.
	fallback  *os.File
	givenBack string
	// takeover bounds this image's takeover (takeover.go).
	takeover
}

// readHandoff reads the handoff the previous image left (nil, nil when the daemon was started,
// not reloaded), and sets the secret variables it carries. With an error, the incoming it
// returns may still give the handoff back (giveBack).
func readHandoff(getenv func(string) string) (*incoming, error) {
	f, ok, err := handoff.FromEnv(getenv)
	if !ok {
		return nil, nil
	}
	// The handoff carries secrets: the image is closed to same-user processes before it reads
	// anything (execve made it dumpable; HardenProcess, later, is for a first start).
	derr := nonDumpable()
	in := &incoming{givenBack: getenv(handoff.EnvGivenBack)}
	if v := getenv(handoff.EnvFallbackFD); v != "" {
		if fd, err := strconv.Atoi(v); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
			in.fallback = os.NewFile(uintptr(fd), "previous-executable")
		}
	}
	for _, k := range []string{handoff.EnvFD, handoff.EnvFallbackFD, handoff.EnvGivenBack} {
		_ = os.Unsetenv(k)
	}
	if err != nil {
		return in, err
	}
	in.raw, err = handoff.ReadRaw(f)
	_ = f.Close()
	if err != nil {
		return in, err
	}
	if derr != nil {
		return in, fmt.Errorf("make the new image non-dumpable before it reads the handoff: %w", derr)
	}
	doc, err := handoff.Decode(in.raw)
	if err != nil {
		return in, err
	}
	// Every descriptor handed over is close-on-exec again before anything forks (a codex
	// child, the login check): the image takes each of them later.
	handoff.Reclaim(doc.FDs()...)
	for k, v := range doc.Env {
		_ = os.Setenv(k, v)
	}
	in.doc = &doc
	return in, nil
}

// execBack re-executes the previous image's executable with the handoff it wrote, because this
// image cannot take over (why), on the main thread when it answers within mainThreadWait (the
// children's parent-death signal follows the thread that forked them) and from this thread
// otherwise. It returns only when that is impossible or failed.
func (in *incoming) execBack(mt *MainThread, why error) error {
	if in == nil || in.fallback == nil || mt == nil {
		return errors.New("no previous executable to give the handoff back to")
	}
	if in.doc != nil {
		for k := range in.doc.Env {
			_ = os.Unsetenv(k) // the previous binary reads them from the handoff again
		}
	}
	if in.raw == nil {
		return errors.New("the handoff could not be read: nothing to give back")
	}
	f, err := handoff.WriteRaw(in.raw)
	if err != nil {
		return err
	}
	defer f.Close()
	fd := rawFD(f)
	fds := []int{fd}
	if in.doc != nil {
		fds = append(fds, in.doc.FDs()...)
	}
	if err := handoff.Inherit(fds...); err != nil {
		return err
	}
	env := append(os.Environ(), fmt.Sprintf("%s=%d", handoff.EnvFD, fd), handoff.EnvGivenBack+"="+why.Error())
	path := fmt.Sprintf("/proc/self/fd/%d", rawFD(in.fallback))
	args := os.Args
	if in.doc != nil && len(in.doc.Args) > 0 {
		args = in.doc.Args // what the previous binary ran with, which this one may have refused
	}
	signal.Ignore(syscall.SIGHUP) // a reload asked for meanwhile is coalesced, as in a reload
	exec := func() { err = syscall.Exec(path, args, env) }
	if !mt.doWithin(exec, mainThreadWait) {
		// The main thread is stuck (a hung image): the children die with it at the exec, but
		// the listeners, the callers' connections and the state go back.
		runtime.LockOSThread()
		exec()
		runtime.UnlockOSThread()
	}
	return fmt.Errorf("exec the previous executable %s: %w", path, err)
}

// carriedLogin is what the previous image's ChatGPT login manager knew beyond auth.json (none
// when the daemon was started, not reloaded).
func carriedLogin(doc *handoff.Doc, log *zap.Logger) codexauth.Carried {
	var c codexauth.Carried
	if doc != nil && len(doc.ChatGPT) > 0 {
		if err := json.Unmarshal(doc.ChatGPT, &c); err != nil {
			log.Error("reload: the previous image's ChatGPT login state is unreadable; auth.json alone is read", zap.Error(err))
		}
	}
	return c
}

// reloadServed records that the image a reload started serves: the reload's outcome turns from
// starting to ok only now, so status and `supervisor reload` do not call a reload ok while its
// image still adopts the children and opens the inbox (or fails to). It is counted then too.
func (d *daemon) reloadServed() {
	d.reloadMu.Lock()
	served := d.lastReload != nil && d.lastReload.Outcome == reloadStarting
	if served {
		d.lastReload.Outcome = reloadOK
	}
	d.reloadMu.Unlock()
	if served && d.met != nil {
		d.met.ObserveReload(reloadOK)
	}
}

// takeLock takes the state directory's lock from the handoff: the flock belongs to the open
// file, which the exec kept.
func takeLock(doc *handoff.Doc, stateDir string) *stateLock {
	handoff.Reclaim(doc.LockFD)
	return &stateLock{f: os.NewFile(uintptr(doc.LockFD), filepath.Join(stateDir, lockFileName))}
}

// continueFrom makes this image the daemon the handoff describes: its start, its reloads and
// the last one's outcome (failed when givenBack says why a next binary gave it back).
func (d *daemon) continueFrom(doc *handoff.Doc, givenBack string) {
	d.reloaded = true
	d.exe = doc.Executable
	d.info.Started, d.info.Reloads, d.attempts = doc.Started, doc.Reloads, doc.Attempts
	d.lastReload = &control.ReloadInfo{Attempt: doc.Attempts, Trigger: doc.Trigger, At: doc.Written, Outcome: reloadStarting,
		From: doc.WrittenBy, To: d.info.Version, Children: len(doc.Children), Callers: len(doc.Waiting)}
	for _, c := range doc.Children {
		if c.Turn != nil {
			d.lastReload.Turns++
		}
		for _, t := range c.Threads {
			if t.Turn != nil {
				d.lastReload.Turns++
			}
		}
	}
	if why := givenBack; why != "" {
		d.givenBack = true
		// The next binary could not take over and re-executed this one: same daemon, same
		// children, one reload fewer.
		d.info.Reloads--
		d.lastReload.Outcome, d.lastReload.To = reloadFailed, ""
		d.lastReload.Error = "the new binary could not take over and gave everything back: " + why
		d.log.Error("reload failed: the new binary gave everything back to this one", zap.String("reason", why))
	}
}
