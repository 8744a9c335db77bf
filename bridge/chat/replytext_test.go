package chat

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// authErr is appserver's auth failure, as the supervisor passes it on.
var authErr = &appserver.AuthError{Msg: "credentials expired"}

func TestReplyText(t *testing.T) {
	retry := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name  string
		reply supervisor.Reply
		err   error
		want  Outcome
		has   string
	}{
		{"completed", supervisor.Reply{Status: "completed", Text: "42"}, nil, OutcomeAnswered, "42"},
		{"completed but empty", supervisor.Reply{Status: "completed"}, nil, OutcomeAnswered, textEmpty},
		{"failed with status", supervisor.Reply{Status: "failed", Error: "stream error"}, nil, OutcomeTurnFailed, "codex failed (status failed): stream error"},
		{"failed without message", supervisor.Reply{Status: "failed"}, nil, OutcomeTurnFailed, "codex failed (status failed): no error message"},
		{"failed on auth", supervisor.Reply{Status: "failed", Error: "unexpected status 401 Unauthorized"},
			fmt.Errorf("chat k: codex pid 1: turn: %w", &appserver.AuthError{Msg: "unexpected status 401 Unauthorized"}), OutcomeAuth, "codex login"},
		// appserver decides auth failures; a failed turn it let through is a failed turn, whatever
		// its message says.
		{"failed turn mentioning a login is a turn failure", supervisor.Reply{Status: "failed", Error: "please log in to the tool's website"},
			nil, OutcomeTurnFailed, "codex failed (status failed): please log in to the tool's website"},
		{"interrupted", supervisor.Reply{Status: "interrupted"}, nil, OutcomeTurnFailed, "interrupted before it finished (status interrupted)"},
		{"interrupted with partial text", supervisor.Reply{Status: "interrupted", Text: "partial"}, nil, OutcomeTurnFailed, "partial\n\n[codex was interrupted"},
		{"queue full", supervisor.Reply{}, fmt.Errorf("chat x: %w", supervisor.ErrQueueFull), OutcomeBusy, "try again shortly"},
		{"no slot", supervisor.Reply{}, supervisor.ErrNoSlot, OutcomeBusy, "try again shortly"},
		// Retried up to the bound in appserver, then busy: on the turn, or on opening the thread.
		{"overloaded turn", supervisor.Reply{}, fmt.Errorf("chat k: codex pid 1: turn: run turn on thread t: turn/start on codex pid 1: %w: code -32001 (refused 9 times in 9.7s)",
			appserver.ErrOverloaded), OutcomeBusy, "try again shortly"},
		{"overloaded thread start", supervisor.Reply{}, fmt.Errorf("chat k: codex pid 1: start thread: thread/start on codex pid 1: %w", appserver.ErrOverloaded),
			OutcomeBusy, "try again shortly"},
		{"closed", supervisor.Reply{}, supervisor.ErrClosed, OutcomeClosed, "shutting down"},
		{"watchdog", supervisor.Reply{}, &supervisor.WatchdogError{ChatKey: "k", Watchdog: supervisor.WatchdogPostTool, PID: 1, Err: errors.New("quiet")},
			OutcomeWatchdog, "stopped responding (post_tool_quiet) and was restarted; please send your message again"},
		{"crash loop", supervisor.Reply{}, &supervisor.CrashLoopError{ChatKey: "k", Failures: 4, RetryAt: retry, Err: errors.New("exit 1")},
			OutcomeCrashLoop, "4 failures in a row); it will try again after 03:04:05 UTC"},
		{"auth via type", supervisor.Reply{}, fmt.Errorf("spawn: %w", authErr), OutcomeAuth, "an operator must run `codex login`"},
		{"text that mentions a login is not auth", supervisor.Reply{}, errors.New("tool output: log in at example.com"), OutcomeError,
			"codex could not answer: tool output: log in at example.com"},
		{"auth inside a watchdog", supervisor.Reply{}, &supervisor.WatchdogError{Watchdog: supervisor.WatchdogDead, Err: authErr}, OutcomeAuth, "codex login"},
		{"turn deadline keeps the partial answer and does not claim a restart", supervisor.Reply{Status: "interrupted", Text: "half done"},
			&supervisor.WatchdogError{ChatKey: "k", Watchdog: supervisor.WatchdogTurn, PID: 1, Err: errors.New("deadline")},
			OutcomeWatchdog, "half done\n\n[codex ran past the time limit for one message and was stopped (turn_deadline)"},
		{"child died while starting: no stderr tail in the chat", supervisor.Reply{},
			fmt.Errorf("chat k: resume thread t: %w", &appserver.ExitError{PID: 7, Status: "signal: killed", StderrTail: "secret internals"}),
			OutcomeError, "the codex session for this chat ended unexpectedly and will be restarted"},
		{"protocol error", supervisor.Reply{}, fmt.Errorf("turn: %w", appserver.ErrProtocol), OutcomeError, "ended unexpectedly"},
		{"other", supervisor.Reply{}, errors.New("boom"), OutcomeError, "codex could not answer: boom"},
		{"superseded", supervisor.Reply{Status: "interrupted", TurnID: "t"}, fmt.Errorf("chat k: codex pid 1: turn: %w", supervisor.ErrSuperseded),
			OutcomeSuperseded, "interrupted by a newer message."},
		{"superseded with partial text", supervisor.Reply{Status: "interrupted", TurnID: "t", Text: "half"},
			fmt.Errorf("chat k: %w", supervisor.ErrSuperseded), OutcomeSuperseded, "interrupted by a newer message. What codex had written so far:\n\nhalf"},
		{"steered answer is the turn's answer", supervisor.Reply{Status: "completed", Text: "both", Steered: true}, nil, OutcomeAnswered, "both"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Classify(tc.reply, tc.err); got != tc.want {
				t.Errorf("Classify = %d, want %d", got, tc.want)
			}
			got := ReplyText(tc.reply, tc.err)
			if !strings.Contains(got, tc.has) {
				t.Errorf("ReplyText = %q, want it to contain %q", got, tc.has)
			}
			if strings.Contains(got, "secret internals") {
				t.Errorf("ReplyText = %q leaks the child's stderr tail into the chat", got)
			}
		})
	}
}
