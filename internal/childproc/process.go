package childproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// Defaults for zero ProcessConfig fields.
const (
	DefaultCloseGrace      = 2 * time.Second
	DefaultStderrTailBytes = 16 << 10
)

// ProcessConfig describes one child process.
type ProcessConfig struct {
	// Bin is the executable. Required.
	Bin string
	// Args are its arguments (without argv[0]).
	Args []string
	// Env is its environment; nil means the daemon's.
	Env []string
	// Dir is its working directory; empty means the daemon's.
	Dir string
	// Credential, when set, runs it as that user and group (see SysProcAttr).
	Credential *syscall.Credential
	// StderrTailBytes is how much of its stderr Tail keeps. Default DefaultStderrTailBytes.
	StderrTailBytes int
	// CloseGrace is the wait of each Stop step (stdin EOF, SIGTERM) before the next one, and
	// the wait for its stderr to drain once it exited. Default DefaultCloseGrace.
	CloseGrace time.Duration
	// Logger receives the few things worth a log (a signal that could not be sent); nil means
	// zap.NewNop().
	Logger *zap.Logger
	// Fork, when set, runs start (the fork and exec of the child) and returns its error. The
	// daemon runs it on the one OS thread that outlives every re-exec of the daemon: the kernel
	// sends the parent-death signal (SysProcAttr) when the thread that forked the child exits,
	// and an execve ends every thread but the calling one. Nil runs start on the caller's thread.
	Fork func(start func() error) error
}

// StopHow says which step of the Stop ladder ended the process.
type StopHow int

// The steps of the Stop ladder, in order.
const (
	// StoppedByStdinEOF: the process exited after its stdin was closed (or had exited before).
	StoppedByStdinEOF StopHow = iota
	// StoppedBySIGTERM: the process exited after SIGTERM to its group.
	StoppedBySIGTERM
	// StoppedBySIGKILL: the process was killed with SIGKILL to its group.
	StoppedBySIGKILL
)

// String returns the phrase the logs use for h.
func (h StopHow) String() string {
	switch h {
	case StoppedByStdinEOF:
		return "exited after stdin was closed"
	case StoppedBySIGTERM:
		return "exited after SIGTERM"
	case StoppedBySIGKILL:
		return "killed with SIGKILL"
	}
	return fmt.Sprintf("StopHow(%d)", int(h))
}

// Process is a started child: the leader of its own session and process group (SysProcAttr),
// with pipes this package made for its stdin, stdout and stderr.
//
// Goroutines, both owned by the Process and waited for by Stop:
//   - waiter is the only caller of cmd.Wait; before reaping it SIGKILLs what is left of the
//     group (AwaitExitNoReap keeps the group id reserved until then);
//   - stderr drains the child's stderr into the Tail.
//
// A started Process must be stopped.
type Process struct {
	cfg ProcessConfig
	// log is replaced by SetLogger while the process's goroutines may log.
	log    atomic.Pointer[zap.Logger]
	proc   *os.Process
	pid    int
	stdin  *os.File // write end of the child's stdin
	stdout *os.File // read end of the child's stdout
	errR   *os.File // read end of the child's stderr
	tail   *Tail

	leaderGone chan struct{} // closed when the child itself exited, before its remains are swept
	exited     chan struct{} // closed when the child was reaped; state and waitErr are set before
	state      *os.ProcessState
	waitErr    error
	stderrDone chan struct{} // closed when the stderr drain hit EOF or was cut off
	wg         sync.WaitGroup

	stopOnce sync.Once
	how      StopHow
	stopErr  error
}

// StartProcess starts the child described by cfg.
func StartProcess(cfg ProcessConfig) (*Process, error) {
	if cfg.StderrTailBytes <= 0 {
		cfg.StderrTailBytes = DefaultStderrTailBytes
	}
	if cfg.CloseGrace <= 0 {
		cfg.CloseGrace = DefaultCloseGrace
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	// The pipes are made here rather than by exec.Cmd so that the caller and this package own
	// every reader: exec's copy goroutines would make cmd.Wait block on tools that inherited
	// the pipes.
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			_ = f.Close()
		}
	}
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	inR, inW, err1 := pipe()
	outR, outW, err2 := pipe()
	errR, errW, err3 := pipe()
	if err := errors.Join(err1, err2, err3); err != nil {
		closeAll()
		return nil, fmt.Errorf("pipes: %w", err)
	}

	cmd := exec.Command(cfg.Bin, cfg.Args...)
	cmd.Env = cfg.Env
	cmd.Dir = cfg.Dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	cmd.SysProcAttr = SysProcAttr(cfg.Credential)
	start := cmd.Start
	if cfg.Fork != nil {
		start = func() error { return cfg.Fork(cmd.Start) }
	}
	if err := start(); err != nil {
		closeAll()
		return nil, err
	}
	// The child has its copies; ours would keep the pipes open after it exits.
	_ = inR.Close()
	_ = outW.Close()
	_ = errW.Close()

	return newProcess(cfg, cmd.Process, inW, outR, errR), nil
}

// newProcess returns the Process of the started child proc with our ends of its pipes, and
// starts its goroutines.
func newProcess(cfg ProcessConfig, proc *os.Process, stdin, stdout, stderr *os.File) *Process {
	p := &Process{
		cfg:        cfg,
		proc:       proc,
		pid:        proc.Pid,
		stdin:      stdin,
		stdout:     stdout,
		errR:       stderr,
		tail:       NewTail(cfg.StderrTailBytes),
		leaderGone: make(chan struct{}),
		exited:     make(chan struct{}),
		stderrDone: make(chan struct{}),
	}
	p.SetLogger(cfg.Logger)
	p.wg.Add(2)
	go p.waiter()
	go p.drainStderr()
	return p
}

// AdoptProcess returns the Process of pid, a child this process already has (an earlier image
// of the daemon started it before re-executing itself), over our ends of its pipes. Only cfg's
// StderrTailBytes, CloseGrace and Logger apply. The stderr tail starts empty.
func AdoptProcess(cfg ProcessConfig, pid int, stdin, stdout, stderr *os.File) (*Process, error) {
	if cfg.StderrTailBytes <= 0 {
		cfg.StderrTailBytes = DefaultStderrTailBytes
	}
	if cfg.CloseGrace <= 0 {
		cfg.CloseGrace = DefaultCloseGrace
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if ppid, err := parentOf(pid); err != nil || ppid != os.Getpid() {
		return nil, fmt.Errorf("adopt pid %d: not a child of this process (parent %d): %w", pid, ppid, errors.Join(err, ErrNotChild))
	}
	proc, err := os.FindProcess(pid)
	if err != nil {
		return nil, fmt.Errorf("adopt pid %d: %w", pid, err)
	}
	return newProcess(cfg, proc, stdin, stdout, stderr), nil
}

// ErrNotChild means a process to adopt is not a child of this process.
var ErrNotChild = errors.New("not a child of this process")

// parentOf is pid's parent process id, from /proc.
func parentOf(pid int) (int, error) {
	st, err := ProcFS{}.Stat(pid)
	if err != nil {
		return 0, err
	}
	return st.PPID, nil
}

// PID is the child's process id (and process group id).
func (p *Process) PID() int { return p.pid }

// Stdin is the write end of the child's stdin. Closing it is the first step of Stop.
func (p *Process) Stdin() *os.File { return p.stdin }

// Stdout is the read end of the child's stdout; the caller reads it and closes it.
func (p *Process) Stdout() *os.File { return p.stdout }

// Stderr is the read end of the child's stderr, which the Process drains into Tail. It is
// exposed only to hand the child over to a re-executed daemon (AdoptProcess).
func (p *Process) Stderr() *os.File { return p.errR }

// Exited is closed once the child has exited and been reaped.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// StderrDone is closed once the child's stderr is drained into Tail (EOF, or cut off by Stop).
func (p *Process) StderrDone() <-chan struct{} { return p.stderrDone }

// ProcessState is the child's wait status once it has been reaped, else nil.
func (p *Process) ProcessState() *os.ProcessState {
	select {
	case <-p.exited:
		return p.state
	default:
		return nil
	}
}

// ExitErr is what the wait returned once the child has been reaped, else nil.
func (p *Process) ExitErr() error {
	select {
	case <-p.exited:
		return p.waitErr
	default:
		return nil
	}
}

// Tail holds the end of the child's stderr.
func (p *Process) Tail() *Tail { return p.tail }

// Stop ends the child and waits for the Process's goroutines: close its stdin, wait CloseGrace,
// SIGTERM its process group, wait CloseGrace, SIGKILL the group; the child is always reaped.
// When ctx is done, the remaining waits are skipped and the group is SIGKILLed at once. Stop
// then lets stderr drain for up to CloseGrace. It reports which step ended the child. Stop is
// idempotent and safe for concurrent use; every call returns after the goroutines have exited.
func (p *Process) Stop(ctx context.Context) (StopHow, error) {
	p.stopOnce.Do(func() { p.how, p.stopErr = p.stop(ctx) })
	return p.how, p.stopErr
}

func (p *Process) stop(ctx context.Context) (StopHow, error) {
	grace := p.cfg.CloseGrace
	how := StoppedByStdinEOF
	var errs []error
	if err := p.stdin.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		errs = append(errs, fmt.Errorf("close stdin of pid %d: %w", p.pid, err))
	}
	// Each rung waits for the child's own exit, not for the sweep of its remains that precedes
	// the reap: a child that obeyed in time is not escalated because the sweep took a while.
	if !awaitCtx(ctx, p.leaderGone, grace) {
		// With ctx done the SIGTERM step is skipped: SIGKILL at once, like os/exec's Cancel. A
		// SIGTERM sent first could still end a child that has not yet set its handler up.
		exited := false
		if ctx.Err() == nil {
			how = StoppedBySIGTERM
			p.signalGroup(syscall.SIGTERM)
			exited = awaitCtx(ctx, p.leaderGone, grace)
		}
		if !exited {
			how = StoppedBySIGKILL
			p.signalGroup(syscall.SIGKILL)
		}
	}
	<-p.exited // SIGKILL cannot be ignored; the sweep is bounded by grace and the reap follows
	if !awaitCtx(context.Background(), p.stderrDone, grace) {
		_ = p.errR.Close() // a process that left the group still holds stderr open
	}
	p.wg.Wait()
	return how, errors.Join(errs...)
}

// SetLogger makes base (with the child's pid added) the logger of the process's later lines:
// a child started before its chat was known names the chat that takes it. Safe to call while the
// process runs.
func (p *Process) SetLogger(base *zap.Logger) {
	if base == nil {
		base = zap.NewNop()
	}
	p.log.Store(base.With(zap.Int("pid", p.pid)))
}

// signalGroup signals the child's process group. ESRCH (already gone) is fine.
func (p *Process) signalGroup(sig syscall.Signal) {
	if err := syscall.Kill(-p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		p.log.Load().Warn("signal process group", zap.Stringer("signal", sig), zap.Error(err))
	}
}

// waiter is the only one to reap the child. A non-zero exit is an *exec.ExitError, as from
// exec.Cmd.Wait.
func (p *Process) waiter() {
	defer p.wg.Done()
	noReapErr := AwaitExitNoReap(p.pid)
	if noReapErr == nil {
		close(p.leaderGone)
		// The leader is a zombie, so its group and session ids are still reserved: anything
		// left in them (shells, tools, MCP servers codex started) is an orphan now.
		p.killRemains()
	}
	p.state, p.waitErr = p.proc.Wait()
	if noReapErr != nil {
		close(p.leaderGone)
	}
	if p.waitErr == nil && !p.state.Success() {
		p.waitErr = &exec.ExitError{ProcessState: p.state}
	}
	close(p.exited)
}

// drainStderr copies the child's stderr into the tail until EOF.
func (p *Process) drainStderr() {
	defer p.wg.Done()
	defer close(p.stderrDone)
	buf := make([]byte, 32<<10)
	for {
		n, err := p.errR.Read(buf)
		if n > 0 {
			_, _ = p.tail.Write(buf[:n])
		}
		if err != nil {
			_ = p.errR.Close()
			return
		}
	}
}

// awaitCtx waits up to d for ch to close; it gives up early when ctx is done.
func awaitCtx(ctx context.Context, ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
}
