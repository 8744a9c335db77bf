package appserver

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// Sentinel errors. Match them with errors.Is; the errors returned wrap them with the pid, thread
// and turn involved.
var (
	// ErrThreadNotFound means thread/resume was rejected because codex does not know the thread
	// (-32600: "no rollout found", "thread not found", ...). The caller starts a new thread.
	ErrThreadNotFound = errors.New("codex thread not found")
	// ErrWedged means a turn did not end within the grace after turn/interrupt. The child is no
	// longer usable for turns; the caller retires it.
	ErrWedged = errors.New("codex turn ignored interrupt")
	// ErrChildExited means the child exited or its stdout stream broke. The error carrying it is
	// an *ExitError with the exit status and the stderr tail.
	ErrChildExited = errors.New("codex app-server exited")
	// ErrHandshakeTimeout means the child did not answer initialize within HandshakeTimeout.
	ErrHandshakeTimeout = errors.New("codex app-server handshake timed out")
	// ErrOverloaded is the server's -32001 "Server overloaded; retry later": retry with backoff.
	ErrOverloaded = errors.New("codex app-server overloaded")
	// ErrProtocol means the child wrote something that is not JSON-RPC (a non-JSON line, an
	// unexpected message). The stream is unusable afterwards; it comes wrapped in an *ExitError.
	// A well-formed message that lacks what the client needs (a result without a thread or turn
	// id, a turn/completed without a status) fails only that call or turn, without *ExitError.
	ErrProtocol = errors.New("codex app-server protocol error")
	// ErrLineTooLong means the child wrote a line longer than Config.MaxLineBytes. It wraps
	// ErrProtocol.
	ErrLineTooLong = fmt.Errorf("%w: line too long", ErrProtocol)
	// ErrTurnInProgress means RunTurn was called while another turn of the same client was still
	// running. codex would merge the two turns, so the client refuses the second one.
	ErrTurnInProgress = errors.New("a turn is already running on this codex app-server")
	// ErrClosed means the client was closed by its owner.
	ErrClosed = errors.New("codex app-server client closed")
)

// ExitError describes why a child stopped being usable: it exited, or its stream broke while it
// was still running. It wraps ErrChildExited and, when set, Reason.
type ExitError struct {
	PID int
	// Status is the wait status ("exit status 2", "signal: killed"), or "running" when the
	// stream broke while the process was still alive.
	Status string
	// Code is the exit code, or -1 when the child was killed by a signal or was still running.
	Code int
	// Reason is what broke the stream (for example ErrLineTooLong or a non-JSON line), nil for a
	// plain exit.
	Reason error
	// StderrTail is the last part of the child's stderr.
	StderrTail string
}

func (e *ExitError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "codex app-server pid %d", e.PID)
	if e.Reason != nil {
		fmt.Fprintf(&b, ": %v", e.Reason)
		if e.Status != "" {
			fmt.Fprintf(&b, " (child %s)", e.Status)
		}
	} else {
		fmt.Fprintf(&b, " exited unexpectedly (%s)", e.Status)
	}
	if tail := strings.TrimSpace(e.StderrTail); tail != "" {
		fmt.Fprintf(&b, "; stderr tail:\n%s", tail)
	} else {
		b.WriteString("; stderr was empty")
	}
	return b.String()
}

// Unwrap makes errors.Is match ErrChildExited and the Reason chain.
func (e *ExitError) Unwrap() []error {
	if e.Reason == nil {
		return []error{ErrChildExited}
	}
	return []error{ErrChildExited, e.Reason}
}

// AuthError means codex could not authenticate with its model provider (expired or missing
// login). Retrying does not help; an operator has to log codex in again.
type AuthError struct {
	// Msg is the codex message or stderr line that revealed the problem.
	Msg string
	// Err is the underlying error, if any (for example an *ExitError).
	Err error
}

func (e *AuthError) Error() string {
	return fmt.Sprintf("codex is not logged in or its credentials expired: run `codex login` as the "+
		"daemon's user (with the same CODEX_HOME) and try again (codex said: %s)", e.Msg)
}

// Unwrap returns the underlying error.
func (e *AuthError) Unwrap() error { return e.Err }

// authMessage is the one place that decides whether codex failed for lack of login. It
// returns the evidence (codex's message or stderr line), or "" when the failure is something
// else. te is the failed turn's turn.error (nil when there is none, as for a child that exited);
// stderr is what codex wrote meanwhile.
//
// Wire facts it relies on (codex 0.169, turn.error.codexErrorInfo): a rejected or unrefreshable
// login is "unauthorized", or an HTTP kind carrying httpStatusCode 401; every other kind names a
// cause that is not the login. Only where codex names no cause (kind "other", which is how a
// provider's unexpected HTTP status arrives, or no codexErrorInfo at all, as in a child that
// exited) is codex's own text read: the message and its details, then its stderr.
func authMessage(te *protocol.TurnError, stderr string) string {
	text := ""
	if te != nil {
		text = te.Message
		if te.AdditionalDetails != nil {
			text += " " + *te.AdditionalDetails
		}
	}
	switch kind, status := te.Kind(); kind {
	case protocol.CodexErrorUnauthorized:
		return text
	case protocol.CodexErrorHTTPConnectionFailed, protocol.CodexErrorResponseStreamConnectionFailed,
		protocol.CodexErrorResponseStreamDisconnected, protocol.CodexErrorResponseTooManyFailedAttempts:
		if status == http.StatusUnauthorized {
			return text
		}
		return ""
	case "", protocol.CodexErrorOther:
	default:
		return ""
	}
	if authLine(text) != "" {
		return text
	}
	return authLine(stderr)
}

// authPattern matches what codex writes when its credentials are missing, expired or revoked:
// HTTP 401s, OAuth invalid_grant, failed token refreshes and its "please log in" hints. Only
// authMessage applies it, and only to codex's own texts.
var authPattern = regexp.MustCompile(`(?i)\b401\b|unauthori[sz]ed|invalid_grant|refresh[ _-]?token|` +
	`token[ _-]?refresh|\blog[ -]?in\b|logged[ -]?(in|out)\b|not authenticated|authentication (failed|required)`)

// authLine returns the first line of text that looks like an auth failure, trimmed, or "".
func authLine(text string) string {
	loc := authPattern.FindStringIndex(text)
	if loc == nil {
		return ""
	}
	start := strings.LastIndexByte(text[:loc[0]], '\n') + 1
	end := strings.IndexByte(text[loc[1]:], '\n')
	if end < 0 {
		end = len(text)
	} else {
		end += loc[1]
	}
	return strings.TrimSpace(text[start:end])
}

// classifyExit turns an *ExitError whose stderr shows an auth failure into an *AuthError that
// wraps it, so that callers both tell the operator what to do and still see ErrChildExited.
func classifyExit(err error) error {
	var ee *ExitError
	if errors.As(err, &ee) {
		if msg := authMessage(nil, ee.StderrTail); msg != "" {
			return &AuthError{Msg: msg, Err: err}
		}
	}
	return err
}

// noActiveTurnMessage is codex's whole answer to a turn/interrupt that finds no active turn on
// the thread: {"code":-32600,"message":"no active turn to interrupt"} (codex-cli 0.169.0,
// verified with the real binary; docs/PROTOCOL.md "Interrupting a turn"). codex answers
// turn/start before it registers the turn as active, so an interrupt sent right after the
// answer gets it too, not only one sent after the turn ended. -32600 is every invalid request
// (a wrong turn id, an unknown thread), and codex attaches no error kind, so the message is all
// that tells this refusal apart; this is the one place that reads it.
const noActiveTurnMessage = "no active turn to interrupt"

// isNoActiveTurn reports codex's refusal of a turn/interrupt for want of an active turn.
func isNoActiveTurn(err error) bool {
	var re *jsonrpc2.Error
	return errors.As(err, &re) && re.Code == protocol.CodeInvalidRequest && re.Message == noActiveTurnMessage
}

// activeWriterSuffix ends codex's refusal of a call on a thread whose rollout another writer
// holds: -32600 "thread <id> already has an active writer" (codex 0.171; docs/PROTOCOL.md). The
// writer is another process's (a child that still has the thread loaded), or, for a moment
// after a turn's turn/completed, the same process's for that turn. As for isNoActiveTurn, the
// message is all that tells this -32600 apart, and this is the one place that reads it.
const activeWriterSuffix = " already has an active writer"

// isActiveWriter reports codex's refusal of a thread call for a writer that holds the thread.
func isActiveWriter(err error) bool {
	var re *jsonrpc2.Error
	return errors.As(err, &re) && re.Code == protocol.CodeInvalidRequest && strings.HasPrefix(re.Message, "thread ") &&
		strings.HasSuffix(re.Message, activeWriterSuffix)
}
