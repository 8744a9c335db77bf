// Package reload is the sequence of a reload in place: check the new binary, quiesce the
// intake, freeze the pool, pause the servers, hand everything over and re-execute, and undo
// each of these, in reverse, when a step fails or a stop comes. It knows nothing of the pieces
// it moves: the daemon (package daemon) gives them as Steps; the document the next image reads
// is package handoff's. docs/HANDOFF.md describes the whole.
package reload

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Outcome is how a reload ended, in status and metrics.
type Outcome string

// Outcomes. OK is recorded by the next image; Run returns the others.
const (
	OK      Outcome = "ok"
	Refused Outcome = "refused" // nothing was handed over: every step was undone
	Failed  Outcome = "failed"  // the exec itself failed; every step was undone
	Running Outcome = "running"
	// Starting is recorded by the next image from its takeover until it serves: the reload is
	// still under way, and its outcome is OK once the image serves.
	Starting Outcome = "starting"
)

// ErrStop is the reason of a reload called off by a stop (a signal, or a stop on the control
// socket) that came while it ran: the daemon serves on only to drain.
var ErrStop = errors.New("a stop was asked for during the reload")

// Steps are what a reload does to the daemon. Run calls them in the order of the fields; the
// optional ones may be nil.
type Steps struct {
	// Preflight runs the new binary's preflight and returns its version.
	Preflight func(ctx context.Context) (version string, err error)
	// Bound bounds quiescing and freezing (--drain-timeout).
	Bound time.Duration
	// StopIntake stops taking messages; StartIntake takes them again.
	StopIntake  func(ctx context.Context) error
	StartIntake func()
	// Freeze pauses every child (see supervisor.Freeze); Thaw undoes it.
	Freeze func(ctx context.Context) error
	Thaw   func()
	// CutIntake (optional) makes a stop of the intake that Freeze refused stop waiting for the
	// requests in flight, which go on by themselves.
	CutIntake func()
	// AwaitIntake (optional) waits for the intake StopIntake stopped.
	AwaitIntake func(ctx context.Context) error
	// TakeWaiting (optional) takes the connections of the callers whose turns cross;
	// GiveWaiting gives them back to this image's inbox.
	TakeWaiting func(ctx context.Context) error
	GiveWaiting func()
	// Settle (optional) waits, within Bound, for what is in flight outside the pool and cannot
	// cross (a token refresh awaiting its answer), holds it until the exec, and returns what
	// lets it go.
	Settle func(ctx context.Context) (resume func(), err error)
	// PauseServers (optional) pauses the status and metrics listeners, last, and returns what
	// resumes them.
	PauseServers func() (resume func())
	// StopPending reports a stop asked for and not yet acted on.
	StopPending func() bool
	// Prepare writes what the next image reads (the sessions, the handoff document).
	Prepare func() error
	// Exec re-executes the new binary; it returns only when that did not happen. An error
	// wrapping ErrStop means a stop came at its last moment.
	Exec func() error
}

// Result is the end of a reload that did not happen (a reload that happened does not return).
type Result struct {
	Outcome Outcome
	// Version is the new binary's, once its preflight answered.
	Version string
	Err     error
}

// Run runs the reload. It returns only when the reload did not happen, with the daemon as it
// was before (every step undone) and the reason; errors.Is(res.Err, ErrStop) when a stop called
// it off.
func Run(s Steps) Result {
	var res Result
	v, err := s.Preflight(context.Background())
	if err != nil {
		return Result{Outcome: Refused, Err: err}
	}
	res.Version = v
	refuse := func(err error) Result {
		res.Outcome, res.Err = Refused, err
		return res
	}

	ctx, cancel := context.WithTimeout(context.Background(), s.Bound)
	defer cancel()
	if err := s.StopIntake(ctx); err != nil {
		s.StartIntake()
		return refuse(err)
	}
	if err := s.Freeze(ctx); err != nil {
		if s.CutIntake != nil {
			s.CutIntake()
		}
		if s.AwaitIntake != nil {
			_ = s.AwaitIntake(context.Background())
		}
		s.StartIntake()
		return refuse(fmt.Errorf("the children could not be paused within %s: %w", s.Bound, err))
	}
	undo := []func(){func() {
		s.Thaw()
		s.StartIntake()
		if s.GiveWaiting != nil {
			s.GiveWaiting()
		}
	}}
	unwind := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	if s.AwaitIntake != nil {
		if err := s.AwaitIntake(ctx); err != nil {
			unwind()
			return refuse(err)
		}
	}
	if s.TakeWaiting != nil {
		if err := s.TakeWaiting(ctx); err != nil {
			unwind()
			return refuse(err)
		}
	}
	if s.Settle != nil {
		resume, err := s.Settle(ctx)
		if err != nil {
			unwind()
			return refuse(err)
		}
		undo = append(undo, resume)
	}
	if s.PauseServers != nil {
		undo = append(undo, s.PauseServers())
	}
	// A stop asked for meanwhile wins over the reload: it stays pending, and the daemon
	// drains once it serves again.
	if s.StopPending() {
		unwind()
		return refuse(ErrStop)
	}
	if err := s.Prepare(); err != nil {
		unwind()
		return refuse(err)
	}
	err = s.Exec()
	// Still here: the exec failed, or a stop came at its last moment.
	unwind()
	if errors.Is(err, ErrStop) {
		return refuse(err)
	}
	res.Outcome, res.Err = Failed, err
	return res
}
