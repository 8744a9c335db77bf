package appserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/childproc"
)

// A daemon that re-executes itself hands its idle children to its next image: the process
// stays the children's parent, their pipes stay open across the exec, and the next image speaks
// to them without a new spawn or handshake. Pause holds a client's reading at a JSON-RPC message
// boundary so that no byte the child wrote is lost or read twice; the bytes read but not yet
// parsed travel with the child (Handover.Pending).

// ErrNotIdle means a child to pause runs a turn or a token push.
var ErrNotIdle = errors.New("child is not idle")

// ErrNoHandover means the client's child cannot be handed over (a test's pipes).
var ErrNoHandover = errors.New("child cannot be handed over")

// Handover is what the next image needs to go on with a paused child.
type Handover struct {
	PID    int
	Stdin  *os.File // write end of the child's stdin
	Stdout *os.File // read end of the child's stdout
	Stderr *os.File // read end of the child's stderr
	// Pending is what was read from Stdout but not parsed: the start of a line, never a whole
	// message.
	Pending []byte
	// Turn is the child's running turn (PauseRunning); nil for an idle child. A child whose
	// threads run turns side by side (several chats' threads) has them in Turns instead.
	Turn  *TurnHandover
	Turns []*TurnHandover
}

// streamHold is one pause of a lineStream's reader.
type streamHold struct {
	held    chan struct{} // closed by the reader once it holds; pending is set before
	resume  chan struct{} // closed by resume
	pending []byte
}

// Pause stops the client at a message boundary and returns its child's handover. The client
// must be idle: no turn runs (ErrNotIdle once ctx is done otherwise). Until Resume, nothing is read from or
// written to the child, and Close waits. ctx bounds the wait for the reader to reach the
// boundary; on failure the client runs on as before.
func (c *Client) Pause(ctx context.Context) (Handover, error) {
	se, ok := c.proc.(interface{ Stderr() *os.File })
	if !ok {
		return Handover{}, fmt.Errorf("codex pid %d: %w", c.pid, ErrNoHandover)
	}
	// The gate is held for a whole turn, and briefly for a token push: a pause waits out the
	// push (the caller pauses only children its pool has idle).
	for !c.gate.tryAlone() {
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return Handover{}, fmt.Errorf("codex pid %d: %w: %w", c.pid, ErrNotIdle, context.Cause(ctx))
		case <-t.C:
		}
	}
	if err := c.Err(); err != nil {
		c.gate.release()
		return Handover{}, fmt.Errorf("codex pid %d: %w", c.pid, err)
	}
	pending, err := c.stream.pause(ctx)
	if err != nil {
		c.gate.release()
		return Handover{}, fmt.Errorf("codex pid %d: pause reading: %w", c.pid, err)
	}
	c.pauseMu.Lock()
	c.thawed = make(chan struct{})
	c.pauseMu.Unlock()
	return Handover{PID: c.pid, Stdin: c.proc.Stdin(), Stdout: c.proc.Stdout(), Stderr: se.Stderr(), Pending: pending}, nil
}

// Resume undoes Pause: the handover was called off and the client goes on.
func (c *Client) Resume() {
	c.pauseMu.Lock()
	thawed, held := c.thawed, c.held
	c.thawed, c.held = nil, nil
	c.pauseMu.Unlock()
	if thawed == nil {
		return
	}
	if held != nil {
		c.resumeRunning(held)
		c.stream.resume()
		close(thawed)
		return
	}
	c.stream.resume()
	close(thawed)
	c.gate.release()
}

// Adopt returns the client of a child an earlier image of this process handed over (see
// Pause). Its handshake was done then; the child goes on where it was. cfg is the Config the
// child would be started with (Bin, Tokens, Policy, Logger...).
func Adopt(cfg Config, h Handover) (*Client, error) {
	cfg = cfg.withDefaults()
	p, err := childproc.AdoptProcess(childproc.ProcessConfig{
		StderrTailBytes: cfg.StderrTailBytes,
		CloseGrace:      cfg.CloseGrace,
		Logger:          cfg.Logger.Named("appserver"),
	}, h.PID, h.Stdin, h.Stdout, h.Stderr)
	if err != nil {
		return nil, fmt.Errorf("adopt codex app-server: %w", err)
	}
	c := newClientPending(cfg, p, h.Pending)
	if h.Turn != nil {
		c.installTurn(h.Turn)
	}
	for _, th := range h.Turns {
		c.installTurn(th)
	}
	c.wg.Add(2)
	go c.monitor()
	go c.dispatcher()
	if cfg.Tokens != nil {
		c.wg.Add(1)
		go c.pushTokens()
	}
	c.logger().Info("codex app-server adopted from the previous image of the daemon", zap.Int("pending_bytes", len(h.Pending)))
	return c, nil
}

// pause makes the reader hold at the next message boundary and returns the bytes it read past
// the last whole message. The read deadline wakes a reader waiting on the pipe; one parsing
// buffered lines reaches the deadline at its next read from the pipe.
func (s *lineStream) pause(ctx context.Context) ([]byte, error) {
	h := &streamHold{held: make(chan struct{}), resume: make(chan struct{})}
	s.holdMu.Lock()
	s.hold = h
	s.holdMu.Unlock()
	if err := s.in.SetReadDeadline(time.Unix(1, 0)); err != nil {
		s.resume()
		return nil, err
	}
	select {
	case <-h.held:
		return h.pending, nil
	case <-ctx.Done():
		s.resume()
		return nil, context.Cause(ctx)
	}
}

// resume lets a held (or holding) reader go on.
func (s *lineStream) resume() {
	s.holdMu.Lock()
	h := s.hold
	s.hold = nil
	s.holdMu.Unlock()
	if h == nil {
		return
	}
	_ = s.in.SetReadDeadline(time.Time{})
	close(h.resume)
}

// holdHere is called by the reader when a read hit the deadline with partial (the start of a
// line, possibly empty) read. When a pause is wanted, it holds until resume and returns true;
// else it returns false and the deadline error ends reading.
func (s *lineStream) holdHere(partial []byte) bool {
	s.holdMu.Lock()
	h := s.hold
	s.holdMu.Unlock()
	if h == nil {
		return false
	}
	h.pending = append([]byte(nil), partial...)
	close(h.held)
	<-h.resume
	return true
}
