package bridge

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/codexauth"
	"github.com/molecule-ai/codex-warm/protocol"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// Texts of replies that stand in for an answer. They tell the user what happened and what to do;
// raw RPC errors are kept short.
const (
	textBusy               = "codex is busy right now (too many messages waiting); please try again shortly."
	textTokenRefreshFailed = "codex could not renew its ChatGPT login just now (the token service did not answer), so your message was not answered; please send it again in a minute."
	textNotLoggedIn        = "codex is not logged in on the host: an operator must run `codex login` (as the daemon's user), then send your message again."
	textEmpty              = "(codex finished without a text reply)"
	// textSteered answers, on the Molecule inbox, a message added to the chat's running turn
	// (--busy steer): the full reply goes to the message that started the turn.
	textSteered   = "(added to the running turn; codex answered it together with the message before it)"
	maxErrInReply = 1000
)

// outcome classifies a Submit result for counting and for the local inbox's status codes.
type outcome int

const (
	outcomeAnswered   outcome = iota // a completed turn
	outcomeTurnFailed                // the turn ran and failed or was interrupted
	outcomeBusy                      // queue full / no slot / codex overloaded
	outcomeWatchdog                  // a watchdog retired the session
	outcomeCrashLoop                 // the key's child keeps failing
	outcomeAuth                      // codex is not logged in
	outcomeClosed                    // the supervisor is shutting down
	outcomeError                     // anything else
	outcomeStopped                   // the chat's /stop ended or dropped the message
	outcomeSuperseded                // a newer message of the chat interrupted it (--busy interrupt)
)

// classify maps a Submit result to an outcome. It reads types and protocol constants only:
// appserver decides whether codex failed for lack of login (an *appserver.AuthError in the
// chain), so a failed turn that arrives without one is a failed turn, whatever its text says.
func classify(r supervisor.Reply, err error) outcome {
	var wd *supervisor.WatchdogError
	var cl *supervisor.CrashLoopError
	var ae *appserver.AuthError
	switch {
	case err == nil && r.Status == protocol.TurnCompleted:
		return outcomeAnswered
	case err == nil:
		return outcomeTurnFailed
	case errors.Is(err, supervisor.ErrQueueFull), errors.Is(err, supervisor.ErrNoSlot),
		// codex refused the request as overloaded, and appserver's retries ran out.
		errors.Is(err, appserver.ErrOverloaded):
		return outcomeBusy
	case errors.Is(err, supervisor.ErrClosed):
		return outcomeClosed
	case errors.Is(err, supervisor.ErrStopped):
		return outcomeStopped
	case errors.Is(err, supervisor.ErrSuperseded):
		return outcomeSuperseded
	case errors.As(err, &ae), errors.Is(err, codexauth.ErrLoginGone):
		// A login the daemon holds and found gone fails the turn the same way.
		return outcomeAuth
	case errors.As(err, &wd):
		return outcomeWatchdog
	case errors.As(err, &cl):
		return outcomeCrashLoop
	default:
		return outcomeError
	}
}

// replyText is what the user sees for a Submit result: the answer, or a short account of what
// went wrong and what to do. It never returns "".
func replyText(r supervisor.Reply, err error) string {
	var wd *supervisor.WatchdogError
	var cl *supervisor.CrashLoopError
	switch classify(r, err) {
	case outcomeAnswered:
		if strings.TrimSpace(r.Text) == "" {
			return textEmpty
		}
		return r.Text
	case outcomeTurnFailed:
		return turnFailedText(r)
	case outcomeBusy:
		return textBusy
	case outcomeAuth:
		return textNotLoggedIn
	case outcomeWatchdog:
		errors.As(err, &wd)
		if wd.Watchdog == supervisor.WatchdogTurn {
			// The child honoured the interrupt and stays warm: nothing was restarted.
			prefix := ""
			if strings.TrimSpace(r.Text) != "" {
				prefix = r.Text + "\n\n"
			}
			return prefix + "[codex ran past the time limit for one message and was stopped (turn_deadline); please send your message again, or ask for a smaller step.]"
		}
		return fmt.Sprintf("the codex session stopped responding (%s) and was restarted; please send your message again.", wd.Watchdog)
	case outcomeCrashLoop:
		errors.As(err, &cl)
		return fmt.Sprintf("codex keeps failing to start for this chat (%d failures in a row); it will try again after %s. If this persists an operator should check the host.",
			cl.Failures, cl.RetryAt.UTC().Format(time.TimeOnly+" UTC"))
	case outcomeClosed:
		return "the codex daemon is shutting down; please send your message again in a minute."
	case outcomeStopped:
		switch {
		case r.TurnID == "":
			return "dropped by /stop: codex did not work on this message."
		case strings.TrimSpace(r.Text) != "":
			return "stopped. What codex had written so far:\n\n" + r.Text
		default:
			return "stopped."
		}
	case outcomeSuperseded:
		if strings.TrimSpace(r.Text) != "" {
			return "interrupted by a newer message. What codex had written so far:\n\n" + r.Text
		}
		return "interrupted by a newer message."
	default:
		// A child that died or spoke garbage carries its stderr tail and pids in the error: that
		// is for the operator's log, not for the chat.
		if errors.Is(err, appserver.ErrChildExited) || errors.Is(err, appserver.ErrProtocol) {
			return "the codex session for this chat ended unexpectedly and will be restarted; please send your message again."
		}
		var tre *appserver.TokenRefreshError
		if errors.As(err, &tre) {
			// Not "log in again": the login is fine as far as anyone knows; the token service
			// did not answer (the daemon retries it on its own).
			return textTokenRefreshFailed
		}
		return "codex could not answer: " + capText(err.Error(), maxErrInReply)
	}
}

// turnFailedText reports a turn that ran but did not complete, with its status.
func turnFailedText(r supervisor.Reply) string {
	status := r.Status
	if status == "" {
		status = "unknown"
	}
	switch status {
	case protocol.TurnInterrupted:
		if strings.TrimSpace(r.Text) != "" {
			return r.Text + "\n\n[codex was interrupted before it finished (status interrupted)]"
		}
		return "codex was interrupted before it finished (status interrupted); please send your message again."
	case protocol.TurnFailed:
		msg := strings.TrimSpace(r.Error)
		if msg == "" {
			msg = "no error message"
		}
		return fmt.Sprintf("codex failed (status failed): %s", capText(msg, maxErrInReply))
	default:
		msg := fmt.Sprintf("codex ended the turn with status %s", status)
		if r.Error != "" {
			msg += ": " + capText(r.Error, maxErrInReply)
		}
		if strings.TrimSpace(r.Text) != "" {
			msg = r.Text + "\n\n[" + msg + "]"
		}
		return msg
	}
}

// Outcome names of OutcomeName: a small fixed set, fit for a metric label.
const (
	OutcomeCompleted   = "completed"
	OutcomeFailed      = "failed"
	OutcomeInterrupted = "interrupted"
	OutcomeStopped     = "stopped"
	OutcomeBusy        = "busy"
	OutcomeCrashLoop   = "crash_loop"
	OutcomeNotLoggedIn = "not_logged_in"
	OutcomeClosed      = "shutting_down"
	OutcomeError       = "error"
	// OutcomeWatchdogPrefix precedes the watchdog's name (supervisor.Watchdog*):
	// "watchdog_turn_deadline". A name the supervisor does not define reads "watchdog_other".
	OutcomeWatchdogPrefix = "watchdog_"
)

// OutcomeName names a Submit result by the classification the replies use: OutcomeCompleted,
// OutcomeFailed or OutcomeInterrupted for a turn that ran, else one of the other Outcome names.
// The set is fixed and small, whatever the error says.
func OutcomeName(r supervisor.Reply, err error) string {
	switch classify(r, err) {
	case outcomeAnswered:
		return OutcomeCompleted
	case outcomeTurnFailed:
		if r.Status == protocol.TurnInterrupted {
			return OutcomeInterrupted
		}
		return OutcomeFailed
	case outcomeBusy:
		return OutcomeBusy
	case outcomeStopped:
		return OutcomeStopped
	case outcomeCrashLoop:
		return OutcomeCrashLoop
	case outcomeAuth:
		return OutcomeNotLoggedIn
	case outcomeClosed:
		return OutcomeClosed
	case outcomeWatchdog:
		var wd *supervisor.WatchdogError
		errors.As(err, &wd)
		switch wd.Watchdog {
		case supervisor.WatchdogHandshake, supervisor.WatchdogTurn, supervisor.WatchdogPostTool,
			supervisor.WatchdogDead, supervisor.WatchdogWedged:
			return OutcomeWatchdogPrefix + wd.Watchdog
		}
		return OutcomeWatchdogPrefix + "other"
	}
	return OutcomeError
}
