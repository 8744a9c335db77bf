package supervisor

import (
	"errors"
	"fmt"
	"time"

	"github.com/molecule-ai/codex-warm/projector"
	"github.com/molecule-ai/codex-warm/supervisor/slots"
	"github.com/molecule-ai/codex-warm/supervisor/turnwatch"
)

// Reply is the outcome of one turn submitted for a chat key.
type Reply struct {
	ChatKey  string
	ThreadID string
	TurnID   string
	// Text is the turn's final answer (see projector.Project). It may be empty for a failed or
	// interrupted turn.
	Text string
	// Status is the codex turn status: "completed", "interrupted" or "failed".
	Status string
	// Error is the codex turn error message of a failed turn, else empty.
	Error    string
	Usage    projector.Usage
	Duration time.Duration
	// NewThread is true when this turn ran on a thread started for it (first message of the key,
	// or the stored thread could not be resumed).
	NewThread bool
	// ResumeFailed is true when a stored thread id could not be resumed and a new thread was
	// started instead: the conversation's earlier context is gone.
	ResumeFailed bool
	// PID is the codex child that ran the turn.
	PID int
	// Steered is true when this message was added to the running turn of an earlier message
	// of the chat (BusySteer): the rest of the Reply is that turn's, which answered both.
	Steered bool
	// Notices say what of the message codex was not shown, e.g. "image 1 not shown: 40000×40000
	// pixels, over the 40-megapixel limit for images". The chat should hear them with the reply
	// (WithNotices); codex was told too.
	Notices []string
}

// TurnEvent describes one Submit call as it returns; see Config.OnTurn.
type TurnEvent struct {
	ChatKey string
	// Reply and Err are what Submit returns. Reply.Duration is the codex turn's own duration;
	// Reply.TurnID is empty when no turn ran.
	Reply Reply
	Err   error
	// Latency is the caller's wait, from the Submit call to its return: queueing, a child start
	// and the turn.
	Latency time.Duration
	// StartedChild is true when the message started a child for its chat key or took a spare:
	// the chat's first message, or its first after its child was retired.
	StartedChild bool
}

// Errors returned by Submit. Callers turn them into replies a user can act on.
var (
	// ErrQueueFull means the chat key already has the maximum number of messages waiting.
	ErrQueueFull = errors.New("chat is busy: too many messages waiting")
	// ErrClosed means the supervisor is shutting down and takes no new work.
	ErrClosed = errors.New("supervisor is shutting down")
	// ErrNoSlot means every child slot stayed busy for longer than the slot wait.
	ErrNoSlot = slots.ErrNoSlot
)

// Watchdog names, used in WatchdogError and in Totals.Retired.
const (
	WatchdogHandshake = "handshake_timeout"
	WatchdogTurn      = turnwatch.Deadline
	WatchdogPostTool  = turnwatch.PostTool
	WatchdogDead      = "child_died"
	WatchdogWedged    = "interrupt_ignored"
	// WatchdogModelUnreachable ends a turn whose model could not be reached; the child stays.
	WatchdogModelUnreachable = turnwatch.ModelUnreachable
)

// WatchdogError reports a turn ended by a watchdog. For WatchdogTurn the child is kept when it
// honoured the interrupt (the turn settled as interrupted); for every other watchdog the child
// was retired and reaped before Submit returned, and the next message of the chat key gets a new
// child that resumes the same thread.
type WatchdogError struct {
	ChatKey  string
	Watchdog string
	PID      int
	// Cause is what codex said of a WatchdogModelUnreachable ("Connection failed: …"); else "".
	Cause string
	Err   error
}

func (e *WatchdogError) Error() string {
	return fmt.Sprintf("chat %s: codex pid %d: turn ended by watchdog %s: %v", e.ChatKey, e.PID, e.Watchdog, e.Err)
}

func (e *WatchdogError) Unwrap() error { return e.Err }

// CrashLoopError means the chat key's child keeps failing to start or dying right away; the
// supervisor is backing off and will try again after RetryAt.
type CrashLoopError struct {
	ChatKey  string
	Failures int
	RetryAt  time.Time
	Err      error // the last failure
}

func (e *CrashLoopError) Error() string {
	return fmt.Sprintf("chat %s: codex keeps failing (%d in a row), next try at %s: %v",
		e.ChatKey, e.Failures, e.RetryAt.UTC().Format(time.RFC3339), e.Err)
}

func (e *CrashLoopError) Unwrap() error { return e.Err }

// State is a child's lifecycle state.
type State string

// Child states. Transitions: starting → idle ⇄ busy → retiring → dead; starting → dead; for a
// spare child, starting → spare → starting (a chat took it) or spare → retiring.
const (
	StateStarting State = "starting"
	StateSpare    State = "spare"
	StateIdle     State = "idle"
	StateBusy     State = "busy"
	StateRetiring State = "retiring"
	StateDead     State = "dead"
)

// ChildStatus is one row of the live process table.
type ChildStatus struct {
	ChatKey      string        `json:"chat_key"`
	ThreadID     string        `json:"thread_id"`
	PID          int           `json:"pid"`
	State        State         `json:"state"`
	TurnAge      time.Duration `json:"turn_age_ns"`
	Turns        int           `json:"turns"`
	Restarts     int           `json:"restarts"`
	Queued       int           `json:"queued"`
	Uptime       time.Duration `json:"uptime_ns"`
	LastActivity time.Time     `json:"last_activity"`
	// Activity is what the chat's running turn is doing now, one line: "starting", "thinking",
	// "writing", `running "npm test"`, "editing 2 files", "calling server.tool", "waiting for
	// approval"; empty when no turn runs. ActivitySince is when that step began.
	Activity      string    `json:"activity,omitempty"`
	ActivitySince time.Time `json:"activity_since,omitzero"`
	// RSSBytes, PSSBytes and USSBytes are the child's resident, proportional and private memory
	// (/proc/<pid>/smaps_rollup), as the memory sampler last read them (read at the snapshot for
	// a child not sampled yet). Warm children share the codex binary's pages, so RSS counts them
	// once per child; PSS divides them among the children (summed, they count once) and USS is
	// what retiring the child gives back. Zero when unreadable.
	RSSBytes int64 `json:"rss_bytes"`
	PSSBytes int64 `json:"pss_bytes"`
	USSBytes int64 `json:"uss_bytes"`
	// Threads is how many chats' threads (spares' included) live in this row's child when
	// children are shared (Config.ThreadsPerChild > 1); the memory figures are then the row's
	// share: the child's divided by Threads. 0 when the child is the chat's alone.
	Threads int `json:"threads,omitempty"`
}

// Totals summarizes the pool.
type Totals struct {
	// Live counts the sessions: a chat's (or a spare's) thread in a child. With shared
	// children several share one child; Children counts the processes.
	Live int `json:"live"`
	// Children counts the codex children, ThreadsPerChild is Config.ThreadsPerChild.
	Children        int `json:"children"`
	ThreadsPerChild int `json:"threads_per_child"`
	Busy            int `json:"busy"`
	// Spares counts spare children, ready or starting; they are part of Live.
	Spares  int            `json:"spares"`
	Queued  int            `json:"queued"`
	Cap     int            `json:"cap"`
	Turns   int64          `json:"turns"`
	Retired map[string]int `json:"retired"` // by reason: watchdog names and the Reason constants ("idle", "evicted", "memory", …)
	// StoreErrors counts failed writes of thread ids to the ThreadStore.
	StoreErrors int64 `json:"store_errors"`
	// Restarts counts children started for a chat key whose previous child a watchdog or a
	// failure ended (the per-child figure is ChildStatus.Restarts).
	Restarts int64 `json:"restarts"`
	// CrashBackoffs counts crashes that started or lengthened a restart backoff, of chat keys'
	// children and of spares.
	CrashBackoffs int64 `json:"crash_backoffs"`
	// WaitingForSlot counts chat keys waiting for a free child slot.
	WaitingForSlot int `json:"waiting_for_slot"`
	// OverloadRetries counts requests to children that codex refused as overloaded (-32001) and
	// that were sent again; see appserver.Config.Overload.
	OverloadRetries int64 `json:"overload_retries"`
	// Compactions and CompactionFailures count the long-thread policy's thread/compact/start
	// calls that succeeded and that failed (Config.CompactAfterTurns, CompactAboveBytes).
	Compactions        int64 `json:"compactions"`
	CompactionFailures int64 `json:"compaction_failures"`
	// RSSBytes, PSSBytes and USSBytes sum the children's readings. PSSBytes is what the children
	// cost together; RSSBytes overstates it by the shared pages.
	RSSBytes int64 `json:"rss_bytes"`
	PSSBytes int64 `json:"pss_bytes"`
	USSBytes int64 `json:"uss_bytes"`

	// MemoryBudgetBytes is the bound on the children's summed PSS (Config.MemoryBudget); 0: no
	// budget.
	MemoryBudgetBytes int64 `json:"memory_budget_bytes"`
	// MeasuredPSSBytes sums the children's PSS as the memory sampler last read it.
	MeasuredPSSBytes int64 `json:"measured_pss_bytes"`
	// ChargedBytes is what the budget counts as used: MeasuredPSSBytes plus ChildEstimateBytes
	// for each child (or slot granted) not measured yet. A new child starts while ChargedBytes +
	// ChildEstimateBytes fits the budget.
	ChargedBytes int64 `json:"charged_bytes"`
	// ChildEstimateBytes is what one more child is expected to cost: the mean PSS of the
	// measured children that ran a turn, or DefaultChildEstimate before there is one.
	ChildEstimateBytes int64 `json:"child_estimate_bytes"`
}

// Snapshot is the live process table at one instant.
type Snapshot struct {
	Taken    time.Time     `json:"taken"`
	Children []ChildStatus `json:"children"`
	Totals   Totals        `json:"totals"`
	Model    ModelStatus   `json:"model"`
	Limits   LimitStatus   `json:"limits"`
	// Usage is each chat's token usage, summed over its turns (also of chats without a child).
	Usage map[string]ChatUsage `json:"usage,omitempty"`
}
