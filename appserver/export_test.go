package appserver

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"time"
)

// pipePID stands for the pid of a PipeChild's client. It is above Linux's pid_max (2^22), so
// even a stray signal to its "process group" could only fail with ESRCH.
const pipePID = 1 << 30

// PipeChild is a Client over plain pipes, with no process behind it: the test plays the child
// by writing the child's stdout and reading its stdin. It exists for FuzzLineStream, which feeds
// arbitrary bytes through the very stream, jsonrpc2 connection, queue and dispatcher a real
// child's output goes through, thousands of times a second.
//
// The client is built by newClient and connect, as spawn builds it; only the process part
// (waiter, stderr drain) is left out. Never call Close on it (Close waits for a process to be
// reaped); end it with Exit.
type PipeChild struct {
	C *Client
	// TurnStartSent is closed when the client wrote its first turn/start request.
	TurnStartSent chan struct{}

	stdout  *os.File // write end of the child's stdout
	stdin   *os.File // read end of the child's stdin
	drained chan struct{}
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
	c := newClient(cfg, pipePID)
	c.cmd = &exec.Cmd{} // exitError reads cmd.ProcessState once waitDone is closed
	close(c.stderrDone) // there is no stderr to drain
	c.connect(outR, inW)
	c.wg.Add(2)
	go c.monitor()
	go c.dispatcher()
	p := &PipeChild{C: c, TurnStartSent: make(chan struct{}), stdout: outW, stdin: inR, drained: make(chan struct{})}
	go p.drain()
	return p, nil
}

// drain reads what the client writes until the client closes the child's stdin, as a child
// would: a full pipe would stall the client's writes.
func (p *PipeChild) drain() {
	defer close(p.drained)
	r := bufio.NewReader(p.stdin)
	sent := false
	for {
		line, err := r.ReadBytes('\n')
		if !sent && bytes.Contains(line, []byte(`"method":"turn/start"`)) {
			sent = true
			close(p.TurnStartSent)
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
	close(p.C.waitDone)
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
