package reload

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// world records the steps a reload takes, and fails the ones a case names.
type world struct {
	calls   []string
	fail    map[string]error
	stop    bool
	execErr error
}

func (w *world) step(name string) error {
	w.calls = append(w.calls, name)
	return w.fail[name]
}

func (w *world) steps() Steps {
	return Steps{
		Preflight: func(context.Context) (string, error) { return "v2", w.step("preflight") },
		Bound:     time.Minute,
		StopIntake: func(ctx context.Context) error {
			if _, ok := ctx.Deadline(); !ok {
				return errors.New("no bound")
			}
			return w.step("stop intake")
		},
		StartIntake:  func() { _ = w.step("start intake") },
		Freeze:       func(context.Context) error { return w.step("freeze") },
		Thaw:         func() { _ = w.step("thaw") },
		CutIntake:    func() { _ = w.step("cut intake") },
		AwaitIntake:  func(context.Context) error { return w.step("await intake") },
		TakeWaiting:  func(context.Context) error { return w.step("take waiting") },
		GiveWaiting:  func() { _ = w.step("give waiting") },
		PauseServers: func() func() { _ = w.step("pause servers"); return func() { _ = w.step("resume servers") } },
		StopPending:  func() bool { _ = w.step("stop?"); return w.stop },
		Prepare:      func() error { return w.step("prepare") },
		Exec: func() error {
			_ = w.step("exec")
			return w.execErr
		},
	}
}

// Every way a reload ends short of the exec undoes what it did, in reverse, and says why: the
// daemon serves on as it was.
func TestRunUndoesInReverse(t *testing.T) {
	boom := errors.New("boom")
	undoAll := []string{"resume servers", "thaw", "start intake", "give waiting"}
	head := []string{"preflight", "stop intake", "freeze", "await intake", "take waiting", "pause servers", "stop?"}
	for _, tc := range []struct {
		name    string
		w       world
		outcome Outcome
		is      error
		calls   []string
	}{
		{"preflight refused", world{fail: map[string]error{"preflight": boom}}, Refused, boom,
			[]string{"preflight"}},
		{"intake does not stop", world{fail: map[string]error{"stop intake": boom}}, Refused, boom,
			[]string{"preflight", "stop intake", "start intake"}},
		{"freeze refused", world{fail: map[string]error{"freeze": boom}}, Refused, boom,
			[]string{"preflight", "stop intake", "freeze", "cut intake", "await intake", "start intake"}},
		{"intake does not end", world{fail: map[string]error{"await intake": boom}}, Refused, boom,
			[]string{"preflight", "stop intake", "freeze", "await intake", "thaw", "start intake", "give waiting"}},
		{"stop during the reload", world{stop: true}, Refused, ErrStop,
			append(slices.Clone(head), undoAll...)},
		{"document not written", world{fail: map[string]error{"prepare": boom}}, Refused, boom,
			append(append(slices.Clone(head), "prepare"), undoAll...)},
		{"stop at the exec", world{execErr: fmt.Errorf("called off: %w", ErrStop)}, Refused, ErrStop,
			append(append(slices.Clone(head), "prepare", "exec"), undoAll...)},
		{"exec failed", world{execErr: boom}, Failed, boom,
			append(append(slices.Clone(head), "prepare", "exec"), undoAll...)},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			w := tc.w
			res := Run(w.steps())
			if res.Outcome != tc.outcome || !errors.Is(res.Err, tc.is) {
				t.Errorf("result %+v, want %s with %v", res, tc.outcome, tc.is)
			}
			if !slices.Equal(w.calls, tc.calls) {
				t.Errorf("steps\n got %v\nwant %v", w.calls, tc.calls)
			}
		})
	}
}

// The optional steps may be missing (the Molecule inbox has no waiting callers, no cut).
func TestRunWithoutOptionalSteps(t *testing.T) {
	w := world{execErr: errors.New("exec failed")}
	s := w.steps()
	s.CutIntake, s.AwaitIntake, s.TakeWaiting, s.GiveWaiting, s.PauseServers = nil, nil, nil, nil, nil
	res := Run(s)
	want := []string{"preflight", "stop intake", "freeze", "stop?", "prepare", "exec", "thaw", "start intake"}
	if res.Outcome != Failed || res.Version != "v2" || !slices.Equal(w.calls, want) {
		t.Fatalf("result %+v, steps %v, want %v", res, w.calls, want)
	}
}
