package appserver

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/molecule-ai/codex-warm/internal/childproc"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// pipePID stands for the pid of a PipeChild's client. It is above Linux's pid_max (2^22), so
// even a stray signal to its "process group" could only fail with ESRCH.
const pipePID = 1 << 30

// PipeChild is a Client over plain pipes, with no process behind it: the test plays the child
// by writing the child's stdout and reading its stdin. It exists for FuzzLineStream, which feeds
// arbitrary bytes through the very stream, jsonrpc2 connection, queue and dispatcher a real
// child's output goes through, thousands of times a second.
//
// The PipeChild is the client's child (it satisfies the child interface, as *childproc.Process
// does), and the client is built by newClient, as spawn builds it. Never call Close on it (Close
// waits for the child to be reaped); end it with Exit.
type PipeChild struct {
	C *Client
	// TurnStartSent is closed when the client wrote its first turn/start request.
	TurnStartSent chan struct{}
	// ThreadStartSent is closed when the client wrote its first thread/start request.
	ThreadStartSent chan struct{}

	stdout   *os.File // write end of the child's stdout
	stdin    *os.File // read end of the child's stdin
	outR     *os.File // the client's end of the child's stdout
	inW      *os.File // the client's end of the child's stdin
	exited   chan struct{}
	tail     *childproc.Tail
	noStderr chan struct{} // closed: there is no stderr to drain
	drained  chan struct{}
}

// NewPipeChild builds a client over pipes with cfg (Bin is not needed).
func NewPipeChild(cfg Config) (*PipeChild, error) {
	cfg = cfg.withDefaults()
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		_, _ = outR.Close(), outW.Close()
		return nil, err
	}
	p := &PipeChild{TurnStartSent: make(chan struct{}), ThreadStartSent: make(chan struct{}), stdout: outW, stdin: inR, outR: outR, inW: inW,
		exited: make(chan struct{}), tail: childproc.NewTail(cfg.StderrTailBytes), drained: make(chan struct{})}
	p.noStderr = make(chan struct{})
	close(p.noStderr)
	c := newClient(cfg, p)
	c.wg.Add(2)
	go c.monitor()
	go c.dispatcher()
	p.C = c
	go p.drain()
	return p, nil
}

// The child interface, played by pipes. There is no stderr, so it is drained from the start,
// and no wait status: the client reports the child as "running" to the end.

func (p *PipeChild) PID() int                       { return pipePID }
func (p *PipeChild) Stdin() *os.File                { return p.inW }
func (p *PipeChild) Stdout() *os.File               { return p.outR }
func (p *PipeChild) Exited() <-chan struct{}        { return p.exited }
func (p *PipeChild) ProcessState() *os.ProcessState { return nil }
func (p *PipeChild) ExitErr() error                 { return nil }
func (p *PipeChild) Tail() *childproc.Tail          { return p.tail }
func (p *PipeChild) StderrDone() <-chan struct{}    { return p.noStderr }
func (p *PipeChild) Stop(context.Context) (childproc.StopHow, error) {
	panic("PipeChild: end it with Exit, not Close")
}

// drain reads what the client writes until the client closes the child's stdin, as a child
// would: a full pipe would stall the client's writes.
func (p *PipeChild) drain() {
	defer close(p.drained)
	r := bufio.NewReader(p.stdin)
	sent, threadSent := false, false
	for {
		line, err := r.ReadBytes('\n')
		if !sent && bytes.Contains(line, []byte(`"method":"turn/start"`)) {
			sent = true
			close(p.TurnStartSent)
		}
		if !threadSent && bytes.Contains(line, []byte(`"method":"thread/start"`)) {
			threadSent = true
			close(p.ThreadStartSent)
		}
		if err != nil {
			return
		}
	}
}

// Write writes b to the child's stdout. It fails (EPIPE) once the client closed the connection.
func (p *PipeChild) Write(b []byte) (int, error) { return p.stdout.Write(b) }

// Exit plays the child's exit: its stdout closes and the process is "reaped". The client then
// fails as it does for a real child and releases the connection.
func (p *PipeChild) Exit() {
	_ = p.stdout.Close()
	close(p.exited)
}

// Wait waits up to d, after Exit, for the client's goroutines to end and for the client to close
// the child's stdin.
func (p *PipeChild) Wait(d time.Duration) error {
	wg := make(chan struct{})
	go func() {
		p.C.wg.Wait()
		close(wg)
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for _, w := range []struct {
		ch   <-chan struct{}
		what string
	}{{wg, "the client's goroutines did not end"}, {p.drained, "the client did not close the child's stdin"}} {
		select {
		case <-w.ch:
		case <-timer.C:
			return fmt.Errorf("%s within %s of the child's exit", w.what, d)
		}
	}
	return p.stdin.Close()
}

// ListModelsPaged is ListModels with pages of at most limit models.
func ListModelsPaged(ctx context.Context, c *Client, includeHidden bool, limit int) ([]protocol.Model, error) {
	return c.listModels(ctx, includeHidden, limit)
}
