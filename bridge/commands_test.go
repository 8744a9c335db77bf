package bridge

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/supervisor"
)

func TestParseCommand(t *testing.T) {
	for _, tc := range []struct {
		text string
		want command
		ok   bool
	}{
		{"/stop", command{name: cmdStop}, true},
		{"  /STOP  ", command{name: cmdStop}, true},
		{"/Cancel", command{name: cmdStop}, true},
		{"/new", command{name: cmdNew}, true},
		{"/reset please", command{name: cmdNew, args: "please"}, true},
		{"/status", command{name: cmdStatus}, true},
		{"/help\tme", command{name: cmdHelp, args: "me"}, true},
		{"/etc/hosts", command{}, false},   // a pasted path
		{"/stopped", command{}, false},     // not the word
		{"please /stop", command{}, false}, // not the whole message
		{"stop", command{}, false},
		{"/", command{}, false},
		{"/unknown thing", command{}, false},
	} {
		got, ok := parseCommand(tc.text)
		if ok != tc.ok || got != tc.want {
			t.Errorf("parseCommand(%q) = %+v, %v; want %+v, %v", tc.text, got, ok, tc.want, tc.ok)
		}
	}
}

// fakeControls records the calls of runCommand.
type fakeControls struct {
	stop     supervisor.StopResult
	reset    supervisor.ResetResult
	resetErr error
	row      supervisor.ChildStatus
	rowOK    bool
	lastErr  string
	calls    []string

	approval   supervisor.Approval
	approvalOK bool
}

func (f *fakeControls) Stop(key string) supervisor.StopResult {
	f.calls = append(f.calls, "stop "+key)
	return f.stop
}

func (f *fakeControls) Reset(_ context.Context, key string) (supervisor.ResetResult, error) {
	f.calls = append(f.calls, "reset "+key)
	return f.reset, f.resetErr
}

func (f *fakeControls) ChatStatus(key string) (supervisor.ChildStatus, bool, string) {
	f.calls = append(f.calls, "status "+key)
	return f.row, f.rowOK, f.lastErr
}

func (f *fakeControls) Answer(key, decision string) (supervisor.Approval, bool) {
	f.calls = append(f.calls, "answer "+key+" "+decision)
	return f.approval, f.approvalOK
}

func (f *fakeControls) PendingApproval(key string) (supervisor.Approval, bool) {
	return f.approval, f.approvalOK
}

func (f *fakeControls) WaitApproval(ctx context.Context, key string, after uint64) (supervisor.Approval, error) {
	<-ctx.Done()
	return supervisor.Approval{}, ctx.Err()
}

func TestRunCommand(t *testing.T) {
	ctx := context.Background()
	run := func(f *fakeControls, name string, dropped int) string {
		return runCommand(ctx, f, "k", command{name: name}, dropped)
	}
	if got := run(&fakeControls{}, cmdStop, 0); got != "nothing to stop" {
		t.Errorf("stop with nothing: %q", got)
	}
	if got := run(&fakeControls{stop: supervisor.StopResult{Interrupted: true, Dropped: 2}}, cmdStop, 1); got != "stopped 4" {
		t.Errorf("stop: %q", got)
	}
	if got := run(&fakeControls{reset: supervisor.ResetResult{OldThreadID: "t-old"}}, cmdNew, 0); !strings.Contains(got, "started over") || !strings.Contains(got, "t-old") {
		t.Errorf("new: %q", got)
	}
	if got := run(&fakeControls{reset: supervisor.ResetResult{Deferred: true}}, cmdNew, 0); !strings.Contains(got, "/stop") {
		t.Errorf("new while busy: %q", got)
	}
	if got := run(&fakeControls{resetErr: errors.New("disk full")}, cmdNew, 0); !strings.Contains(got, "disk full") {
		t.Errorf("new failing: %q", got)
	}
	busy := &fakeControls{rowOK: true, lastErr: "turn failed", row: supervisor.ChildStatus{PID: 42, State: supervisor.StateBusy,
		TurnAge: 2 * time.Second, ThreadID: "t1", Turns: 3, Queued: 1, PSSBytes: 53 << 20,
		Activity: `running "npm test"`, ActivitySince: time.Now().Add(-time.Hour)}}
	got := run(busy, cmdStatus, 0)
	for _, want := range []string{"pid 42", "busy (for 2s), now running \"npm test\" (1h0m", "thread t1", "3 turns", "1 queued", "53 MB", "last error: turn failed"} {
		if !strings.Contains(got, want) {
			t.Errorf("status %q lacks %q", got, want)
		}
	}
	if got := run(&fakeControls{}, cmdStatus, 0); !strings.Contains(got, "no codex session") {
		t.Errorf("status with no child: %q", got)
	}
	if got := run(&fakeControls{}, cmdHelp, 0); !strings.Contains(got, "/stop") || !strings.Contains(got, "/new") {
		t.Errorf("help: %q", got)
	}
}
