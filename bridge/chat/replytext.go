package chat

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/codexauth"
	"github.com/molecule-ai/codex-warm/internal/protocol"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// Texts of replies that stand in for an answer. They tell the user what happened and what to do;
// raw RPC errors are kept short.
const (
	textBusy               = "codex is busy right now (too many messages waiting); please try again shortly."
	textTokenRefreshFailed = "codex could not renew its ChatGPT login just now (the token service did not answer), so your message was not answered; please send it again in a minute."
	textLoginNotRenewed    = "codex's ChatGPT login belongs to the platform, which renews it, and the renewed login has not arrived yet, so your message was not answered; please send it again in a few minutes."
	textNotLoggedIn        = "codex is not logged in on the host: an operator must run `codex login` (as the daemon's user), then send your message again."
	textEmpty              = "(codex finished without a text reply)"
	maxErrInReply          = 1000
)

// Outcome classifies a Submit result for counting, for the Molecule inbox's retries and for the
// local inbox's status codes.
type Outcome int

// Outcomes of Classify.
const (
	OutcomeAnswered   Outcome = iota // a completed turn
	OutcomeTurnFailed                // the turn ran and failed or was interrupted
	OutcomeBusy                      // queue full / no slot / codex overloaded
	OutcomeWatchdog                  // a watchdog retired the session
	OutcomeCrashLoop                 // the key's child keeps failing
	OutcomeAuth                      // codex is not logged in
	OutcomeClosed                    // the supervisor is shutting down
	OutcomeError                     // anything else
	OutcomeStopped                   // the chat's /stop ended or dropped the message
	OutcomeSuperseded                // a newer message of the chat interrupted it (--busy interrupt)
	// OutcomeModelUnreachable: codex could not reach the model service; nothing was answered,
	// the child is fine, and the same message can run once the service is back.
	OutcomeModelUnreachable
	// OutcomeUsageLimit: the account's usage limit is reached (*supervisor.UsageLimitError);
	// nothing was answered, and the same message can run after the reset.
	OutcomeUsageLimit
)

// Classify maps a Submit result to an Outcome. It reads types and protocol constants only:
// appserver decides whether codex failed for lack of login (an *appserver.AuthError in the
// chain), so a failed turn that arrives without one is a failed turn, whatever its text says.
func Classify(r supervisor.Reply, err error) Outcome {
	var wd *supervisor.WatchdogError
	var cl *supervisor.CrashLoopError
	var ae *appserver.AuthError
	var ul *supervisor.UsageLimitError
	switch {
	case err == nil && r.Status == protocol.TurnCompleted:
		return OutcomeAnswered
	case err == nil:
		return OutcomeTurnFailed
	case errors.Is(err, supervisor.ErrQueueFull), errors.Is(err, supervisor.ErrNoSlot),
		// codex refused the request as overloaded, and appserver's retries ran out.
		errors.Is(err, appserver.ErrOverloaded):
		return OutcomeBusy
	case errors.Is(err, supervisor.ErrClosed),
		// A reload: the message is given again to the next image (its turn, if it runs,
		// crossed the reload and answers it there).
		errors.Is(err, supervisor.ErrHandedOver), errors.Is(err, supervisor.ErrReloading):
		return OutcomeClosed
	case errors.Is(err, supervisor.ErrStopped):
		return OutcomeStopped
	case errors.Is(err, supervisor.ErrSuperseded):
		return OutcomeSuperseded
	case errors.As(err, &ae), errors.Is(err, codexauth.ErrLoginGone):
		// A login the daemon holds and found gone fails the turn the same way.
		return OutcomeAuth
	case errors.As(err, &wd) && wd.Watchdog == supervisor.WatchdogModelUnreachable:
		return OutcomeModelUnreachable
	case errors.As(err, &ul):
		return OutcomeUsageLimit
	case errors.As(err, &wd):
		return OutcomeWatchdog
	case errors.As(err, &cl):
		return OutcomeCrashLoop
	default:
		return OutcomeError
	}
}

// ReplyText is what the user sees for a Submit result: the answer, or a short account of what
// went wrong and what to do. It never returns "".
func ReplyText(r supervisor.Reply, err error) string {
	var wd *supervisor.WatchdogError
	var cl *supervisor.CrashLoopError
	switch Classify(r, err) {
	case OutcomeAnswered:
		if strings.TrimSpace(r.Text) == "" {
			return textEmpty
		}
		return r.Text
	case OutcomeTurnFailed:
		return turnFailedText(r)
	case OutcomeBusy:
		return textBusy
	case OutcomeAuth:
		return textNotLoggedIn
	case OutcomeModelUnreachable:
		errors.As(err, &wd)
		return ModelUnreachableText(wd.Cause)
	case OutcomeUsageLimit:
		var ul *supervisor.UsageLimitError
		errors.As(err, &ul)
		return UsageLimitText(ul, time.Now())
	case OutcomeWatchdog:
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
	case OutcomeCrashLoop:
		errors.As(err, &cl)
		return fmt.Sprintf("codex keeps failing to start for this chat (%d failures in a row); it will try again after %s. If this persists an operator should check the host.",
			cl.Failures, cl.RetryAt.UTC().Format(time.TimeOnly+" UTC"))
	case OutcomeClosed:
		return "the codex daemon is shutting down; please send your message again in a minute."
	case OutcomeStopped:
		switch {
		case r.TurnID == "":
			return "dropped by /stop: codex did not work on this message."
		case strings.TrimSpace(r.Text) != "":
			return "stopped. What codex had written so far:\n\n" + r.Text
		default:
			return "stopped."
		}
	case OutcomeSuperseded:
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
		if errors.As(err, &tre) && errors.Is(err, codexauth.ErrNotRenewed) {
			return textLoginNotRenewed
		}
		if errors.As(err, &tre) {
			// Not "log in again": the login is fine as far as anyone knows; the token service
			// did not answer (the daemon retries it on its own).
			return textTokenRefreshFailed
		}
		return "codex could not answer: " + CapText(err.Error(), maxErrInReply)
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
		return fmt.Sprintf("codex failed (status failed): %s", CapText(msg, maxErrInReply))
	default:
		msg := fmt.Sprintf("codex ended the turn with status %s", status)
		if r.Error != "" {
			msg += ": " + CapText(r.Error, maxErrInReply)
		}
		if strings.TrimSpace(r.Text) != "" {
			msg = r.Text + "\n\n[" + msg + "]"
		}
		return msg
	}
}

// Labels of OutcomeLabel: a small fixed set, fit for a metric label.
const (
	LabelCompleted   = "completed"
	LabelFailed      = "failed"
	LabelInterrupted = "interrupted"
	LabelStopped     = "stopped"
	// LabelSuperseded: a newer message of the chat interrupted it (--busy interrupt), as the
	// chat's policy asks; not a failure.
	LabelSuperseded  = "superseded"
	LabelBusy        = "busy"
	LabelCrashLoop   = "crash_loop"
	LabelNotLoggedIn = "not_logged_in"
	LabelClosed      = "shutting_down"
	LabelError       = "error"
	// LabelModelUnreachable: the model service could not be reached (not the user's doing).
	LabelModelUnreachable = "model_unreachable"
	// LabelWatchdogPrefix precedes the watchdog's name (supervisor.Watchdog*):
	// "watchdog_turn_deadline". A name the supervisor does not define reads "watchdog_other".
	LabelWatchdogPrefix = "watchdog_"
)

// OutcomeLabel names a Submit result by the classification the replies use: LabelCompleted,
// LabelFailed or LabelInterrupted for a turn that ran, else one of the other labels.
// The set is fixed and small, whatever the error says.
func OutcomeLabel(r supervisor.Reply, err error) string {
	switch Classify(r, err) {
	case OutcomeAnswered:
		return LabelCompleted
	case OutcomeTurnFailed:
		if r.Status == protocol.TurnInterrupted {
			return LabelInterrupted
		}
		return LabelFailed
	case OutcomeBusy:
		return LabelBusy
	case OutcomeStopped:
		return LabelStopped
	case OutcomeSuperseded:
		return LabelSuperseded
	case OutcomeCrashLoop:
		return LabelCrashLoop
	case OutcomeAuth:
		return LabelNotLoggedIn
	case OutcomeClosed:
		return LabelClosed
	case OutcomeModelUnreachable:
		return LabelModelUnreachable
	case OutcomeUsageLimit:
		return LabelUsageLimit
	case OutcomeWatchdog:
		var wd *supervisor.WatchdogError
		errors.As(err, &wd)
		switch wd.Watchdog {
		case supervisor.WatchdogHandshake, supervisor.WatchdogTurn, supervisor.WatchdogPostTool,
			supervisor.WatchdogDead, supervisor.WatchdogWedged:
			return LabelWatchdogPrefix + wd.Watchdog
		}
		return LabelWatchdogPrefix + "other"
	}
	return LabelError
}

// ModelUnreachableText tells a chat that codex could not reach the model service, with codex's
// account of why. It blames nobody in the chat: the message was fine, the service was not there.
func ModelUnreachableText(cause string) string {
	if cause = strings.TrimSpace(cause); cause == "" {
		cause = "no connection"
	}
	return fmt.Sprintf("the model service could not be reached (%s), so codex could not answer your message yet.", CapText(cause, maxErrInReply))
}
