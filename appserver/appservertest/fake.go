package appservertest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// FakeEnv is the environment variable that selects fake mode; its value is the mode.
const FakeEnv = "CODEX_WARM_FAKE_APPSERVER"

// Fake modes. A mode string is a comma-separated list of them, e.g. "ok,die-after=2".
const (
	// FakeOK answers every turn with "reply #<n>: <text>", n counting the thread's user
	// messages in this process (a resumed thread starts at 1: the fake keeps no history).
	FakeOK = "ok"
	// FakeExitHandshake exits with status 3 when initialize arrives, after a line on stderr.
	FakeExitHandshake = "exit-handshake"
	// FakeExitMidTurn exits with status 2 after the turn's user message, after a line on
	// stderr.
	FakeExitMidTurn = "exit-midturn"
	// FakeNoComplete never completes a turn but honours turn/interrupt.
	FakeNoComplete = "no-complete"
	// FakeHangFirst never completes a thread's first turn by itself but honours turn/interrupt;
	// later turns are answered as FakeOK.
	FakeHangFirst = "hang-first"
	// FakeIgnoreInterrupt never completes a turn; it answers turn/interrupt with {} and
	// nothing else.
	FakeIgnoreInterrupt = "ignore-interrupt"
	// FakeQuietAfterTool sends a completed commandExecution item and then nothing (it honours
	// turn/interrupt).
	FakeQuietAfterTool = "quiet-after-tool"
	// FakeGarbage writes a non-JSON line mid-turn, then carries on.
	FakeGarbage = "garbage"
	// FakeHugeLine writes a 10 MiB item/agentMessage/delta line mid-turn, then carries on.
	FakeHugeLine = "huge-line"
	// FakeApproval sends item/commandExecution/requestApproval (server request id 0 first),
	// waits for the answer and completes with "decision: <decision>". availableDecisions is what
	// codex 0.169 offers (accept, acceptWithExecpolicyAmendment, cancel) unless
	// "approval-offer=a+b" overrides it. A "cancel" answer interrupts the turn, as in codex.
	FakeApproval = "approval"
	// FakeSlowStart answers initialize late: after 60 s, or "slow-start=<ms>". It goes on
	// reading stdin meanwhile, so it exits as soon as the client closes stdin, as codex does.
	FakeSlowStart = "slow-start"
	// FakeUnknownThread answers thread/resume with -32600 "no rollout found ...".
	FakeUnknownThread = "unknown-thread"
	// FakeDieAfter ("die-after=N") exits with status 0 right after completing the Nth turn.
	FakeDieAfter = "die-after"
	// FakeStubborn ignores stdin EOF and SIGTERM: only SIGKILL stops it.
	FakeStubborn = "stubborn"
	// FakeFail fails every turn like a model HTTP 500: an error notification, then
	// turn/completed with status failed.
	FakeFail = "fail"
	// FakeAuthFail fails every turn the way an expired login does (401, refresh token) and
	// logs the refresh failure to stderr.
	FakeAuthFail = "auth-fail"
	// FakeRetryError sends an error notification with willRetry true before the reply.
	FakeRetryError = "retry-error"
	// FakeSlowTurnStart ("slow-turn-start=<ms>") delays the turn/start response; the turn
	// itself is then started, so it can be interrupted.
	FakeSlowTurnStart = "slow-turn-start"
	// FakeEarlyNotify sends the turn's first notifications before the turn/start response,
	// interleaved with notifications of another thread and of another turn of the same thread.
	FakeEarlyNotify = "early-notify"
	// FakeOverload ("overload=<method>:<n>") refuses the next n requests of method with -32001
	// "Server overloaded; retry later.", as codex does when its request queue is full: the
	// request is not processed at all. The mode may be given once per method.
	FakeOverload = "overload"
	// FakeScript plays, for every turn, the raw lines of the file named by FakeScriptEnv after
	// the turn's turn/started and user message. The lines are bytes, not JSON: garbage, NULs,
	// invalid UTF-8 and a CR before the newline are written as they are. In each line
	// "{thread}", "{turn}" and "{turnRequestId}" (the raw JSON id of the client's turn/start
	// request) are replaced. Lines that start with "#fake:" are directives (ScriptAwait,
	// ScriptComplete, ScriptHang, ScriptResult). A script that ends without ScriptComplete or
	// ScriptHang leaves the ending of the turn to its own lines (a scripted turn/completed, say):
	// the fake forgets the turn just before it writes the last line, so that the next turn/start
	// starts a new turn.
	FakeScript = "script"
	// FakeRefreshOnStart makes the process's first turn/start ask the client for a new ChatGPT
	// token (account/chatgptAuthTokens/refresh), wait for the answer and then refuse that
	// turn/start with -32600 "failed to load configuration: application network permission was
	// revoked", as codex 0.171 does when its token is renewed while it loads its configuration
	// for a turn. Later turns are answered as FakeOK. account/login/start is answered as codex
	// answers client-owned tokens.
	FakeRefreshOnStart = "refresh-on-start"
	// FakeLateStart answers turn/start at once but makes the turn active only when a
	// turn/interrupt for it has been refused with codex's -32600 "no active turn to interrupt":
	// real codex answers turn/start before it registers the turn, and refuses an interrupt
	// that arrives in between. The turn then starts (turn/started) and runs until interrupted.
	FakeLateStart = "late-start"
	// FakeRevertBusy ("revert-busy=<n>") refuses the next n thread/revert requests with -32600
	// "thread <id> already has an active writer", as codex 0.171 does now and then under load
	// for a revert sent right after the turn's turn/completed, while it still holds the thread's
	// writer for that turn. thread/revert is otherwise answered with the thread, its turns
	// dropped.
	FakeRevertBusy = "revert-busy"
	// FakeMarked decides each turn by the start of its text, so that the threads of one
	// process can behave differently: "hang" never completes by itself but honours
	// turn/interrupt; "wedge" never completes and ignores turn/interrupt (answering it {}); "die"
	// exits with status 2, as FakeExitMidTurn; any other text is answered as FakeOK.
	FakeMarked = "marked"
)

// FakeScriptEnv names the script file of FakeScript.
const FakeScriptEnv = "CODEX_WARM_FAKE_SCRIPT"

// FakeRecordEnv, when set (in any mode), names a file to which the fake appends every line it
// reads from the client, before acting on it: tests read it to assert what the client answered.
const FakeRecordEnv = "CODEX_WARM_FAKE_RECORD"

// FakeScript directives.
const (
	// ScriptAwait ("#fake:await <id>") waits until the client answered the server request whose
	// raw JSON id is <id> (7, "req-a"): the nth await of an id waits for its nth answer, so a
	// script replayed in the next turn waits again. A turn/interrupt while waiting ends the turn
	// as interrupted, so an unanswered request shows up as a turn that had to be interrupted.
	ScriptAwait = "#fake:await "
	// ScriptComplete completes the turn as FakeOK does ("reply #<n>: <text>"); the rest of the
	// script is not played.
	ScriptComplete = "#fake:complete"
	// ScriptHang sends nothing more until turn/interrupt, which it honours.
	ScriptHang = "#fake:hang"
	// ScriptResult ("#fake:result <method> <JSON>", method thread/start or turn/start) replaces
	// the result of the fake's answers to that request, with "{thread}" and "{turn}" replaced.
	// The fake itself goes on as usual (the thread exists, the turn runs the script). It applies
	// wherever it stands in the script and is not played.
	ScriptResult = "#fake:result "
)

// FakeHugeLineBytes is the size of the delta FakeHugeLine writes.
const FakeHugeLineBytes = 10 << 20

// FakeFailMessage is the turn error message of FakeFail.
const FakeFailMessage = "We're currently experiencing high demand, which may cause temporary errors."

// FakeOverloadedCode and FakeOverloadedMessage are the error FakeOverload answers with: codex
// 0.169's answer to a request that found its request queue full.
const (
	FakeOverloadedCode    = -32001
	FakeOverloadedMessage = "Server overloaded; retry later."
)

// FakeAuthFailMessage is the turn error message of FakeAuthFail.
const FakeAuthFailMessage = "unexpected status 401 Unauthorized: Your access token could not be refreshed. Please log out and sign in again."

// RunFakeIfRequested serves the fake app-server on stdin/stdout and exits the process when
// FakeEnv is set; otherwise it returns at once. Call it first thing in TestMain, before m.Run.
func RunFakeIfRequested() {
	mode, ok := os.LookupEnv(FakeEnv)
	if !ok {
		return
	}
	os.Exit(runFake(mode, os.Stdin, os.Stdout, os.Stderr))
}

// FakeCommand returns the binary and environment that start the fake app-server in mode: the
// running test binary (whose TestMain calls RunFakeIfRequested) with FakeEnv=mode added. The
// binary path is absolute, so a Config.Dir does not break it.
func FakeCommand(mode string) (bin string, env []string) {
	bin = os.Args[0]
	if exe, err := os.Executable(); err == nil {
		bin = exe
	}
	env = make([]string, 0, len(os.Environ())+2)
	gorace := "atexit_sleep_ms=0"
	for _, kv := range os.Environ() {
		switch {
		case strings.HasPrefix(kv, "GORACE="):
			gorace = strings.TrimPrefix(kv, "GORACE=") + " " + gorace
		case strings.HasPrefix(kv, FakeEnv+"="):
		default:
			env = append(env, kv)
		}
	}
	// Under -race the fake would sleep a second at exit (the race detector's default
	// atexit_sleep_ms), which makes a graceful stdin-EOF exit look like a child ignoring it.
	return bin, append(env, "GORACE="+gorace, FakeEnv+"="+mode)
}

type fakeModes struct {
	set           map[string]bool
	dieAfter      int
	slowStart     time.Duration
	slowTurnStart time.Duration
	offer         []string
	overload      map[string]int // FakeOverload: refusals left, by method
	revertBusy    int            // FakeRevertBusy: refusals left
}

func parseFakeModes(mode string) (fakeModes, error) {
	m := fakeModes{set: map[string]bool{}, slowStart: time.Minute, overload: map[string]int{}}
	for _, part := range strings.Split(mode, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, val, hasVal := strings.Cut(part, "=")
		switch name {
		case FakeOK, FakeExitHandshake, FakeExitMidTurn, FakeNoComplete, FakeHangFirst, FakeIgnoreInterrupt,
			FakeQuietAfterTool, FakeGarbage, FakeHugeLine, FakeApproval, FakeUnknownThread,
			FakeStubborn, FakeFail, FakeAuthFail, FakeRetryError, FakeEarlyNotify, FakeScript, FakeLateStart,
			FakeRefreshOnStart, FakeMarked:
		case FakeDieAfter:
			n, err := strconv.Atoi(val)
			if err != nil || n < 1 {
				return m, fmt.Errorf("mode %q: want die-after=N with N >= 1", part)
			}
			m.dieAfter = n
		case FakeSlowStart:
			if hasVal {
				ms, err := strconv.Atoi(val)
				if err != nil {
					return m, fmt.Errorf("mode %q: want slow-start=<milliseconds>", part)
				}
				m.slowStart = time.Duration(ms) * time.Millisecond
			}
		case FakeSlowTurnStart:
			ms, err := strconv.Atoi(val)
			if err != nil {
				return m, fmt.Errorf("mode %q: want slow-turn-start=<milliseconds>", part)
			}
			m.slowTurnStart = time.Duration(ms) * time.Millisecond
		case FakeOverload:
			method, count, _ := strings.Cut(val, ":")
			n, err := strconv.Atoi(count)
			if method == "" || err != nil || n < 1 {
				return m, fmt.Errorf("mode %q: want overload=<method>:<n> with n >= 1", part)
			}
			m.overload[method] = n
		case FakeRevertBusy:
			n, err := strconv.Atoi(val)
			if err != nil || n < 1 {
				return m, fmt.Errorf("mode %q: want revert-busy=<n> with n >= 1", part)
			}
			m.revertBusy = n
		case "approval-offer":
			m.offer = strings.Split(val, "+")
		default:
			return m, fmt.Errorf("unknown fake mode %q", part)
		}
		m.set[name] = true
	}
	return m, nil
}
