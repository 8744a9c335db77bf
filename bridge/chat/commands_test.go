package chat

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"

	"github.com/molecule-ai/codex-warm/supervisor"
)

func TestParseCommand(t *testing.T) {
	for _, tc := range []struct {
		text string
		want Command
		ok   bool
	}{
		{"/stop", Command{Name: CmdStop}, true},
		{"  /STOP  ", Command{Name: CmdStop}, true},
		{"/Cancel", Command{Name: CmdStop}, true},
		{"/new", Command{Name: CmdNew}, true},
		{"/reset please", Command{Name: CmdNew, Args: "please"}, true},
		{"/status", Command{Name: cmdStatus}, true},
		{"/help\tme", Command{Name: cmdHelp, Args: "me"}, true},
		{"/etc/hosts", Command{}, false},   // a pasted path
		{"/stopped", Command{}, false},     // not the word
		{"please /stop", Command{}, false}, // not the whole message
		{"stop", Command{}, false},
		{"/", Command{}, false},
		{"/unknown thing", Command{}, false},
	} {
		got, ok := ParseCommand(tc.text)
		if ok != tc.ok || got != tc.want {
			t.Errorf("ParseCommand(%q) = %+v, %v; want %+v, %v", tc.text, got, ok, tc.want, tc.ok)
		}
	}
}

func TestRunCommand(t *testing.T) {
	ctx := context.Background()
	run := func(f *chattest.Controls, name string, dropped int) string {
		return RunCommand(ctx, f, "k", Command{Name: name}, dropped)
	}
	if got := run(&chattest.Controls{}, CmdStop, 0); got != "nothing to stop" {
		t.Errorf("stop with nothing: %q", got)
	}
	if got := run(&chattest.Controls{StopResult: supervisor.StopResult{Interrupted: true, Dropped: 2}}, CmdStop, 1); got != "stopped 4" {
		t.Errorf("stop: %q", got)
	}
	if got := run(&chattest.Controls{ResetResult: supervisor.ResetResult{OldThreadID: "t-old"}}, CmdNew, 0); !strings.Contains(got, "started over") || !strings.Contains(got, "t-old") {
		t.Errorf("new: %q", got)
	}
	if got := run(&chattest.Controls{ResetResult: supervisor.ResetResult{Deferred: true}}, CmdNew, 0); !strings.Contains(got, "/stop") {
		t.Errorf("new while busy: %q", got)
	}
	if got := run(&chattest.Controls{ResetErr: errors.New("disk full")}, CmdNew, 0); !strings.Contains(got, "disk full") {
		t.Errorf("new failing: %q", got)
	}
	busy := &chattest.Controls{RowOK: true, LastErr: "turn failed", Row: supervisor.ChildStatus{PID: 42, State: supervisor.StateBusy,
		TurnAge: 2 * time.Second, ThreadID: "t1", Turns: 3, Queued: 1, PSSBytes: 53 << 20,
		Activity: `running "npm test"`, ActivitySince: time.Now().Add(-time.Hour)}}
	got := run(busy, cmdStatus, 0)
	for _, want := range []string{"pid 42", "busy (for 2s), now running \"npm test\" (1h0m", "thread t1", "3 turns", "1 queued", "53 MB", "last error: turn failed"} {
		if !strings.Contains(got, want) {
			t.Errorf("status %q lacks %q", got, want)
		}
	}
	if got := run(&chattest.Controls{}, cmdStatus, 0); !strings.Contains(got, "no codex session") {
		t.Errorf("status with no child: %q", got)
	}
	if got := run(&chattest.Controls{}, cmdHelp, 0); !strings.Contains(got, "/stop") || !strings.Contains(got, "/new") {
		t.Errorf("help: %q", got)
	}
}
