package supervisor

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/childproc"
	"github.com/molecule-ai/codex-warm/internal/retention"
	"github.com/molecule-ai/codex-warm/supervisor/chatjob"
	"github.com/molecule-ai/codex-warm/supervisor/hosts"
)

// Child is the part of *appserver.Client the supervisor uses; SpawnFunc starts one (package
// hosts, whose shared children are Children too, defines them).
type (
	Child     = hosts.Child
	SpawnFunc = hosts.SpawnFunc
)

// ThreadStore is the part of *sessions.Store the supervisor uses: the durable chat key → thread id
// map.
type ThreadStore interface {
	Get(key string) (string, bool)
	Set(key, threadID string) error
	Delete(key string) error
	// Archive forgets key's thread id, keeping it with reason where an operator can find it, and
	// returns it ("" when key had none).
	Archive(key, reason string) (string, error)
}

// Defaults of Config fields left zero.
const (
	DefaultMaxQueuePerKey   = 16
	DefaultIdleTTL          = 15 * time.Minute
	DefaultSlotWait         = 30 * time.Second
	DefaultMaxSlotWaiters   = 64
	DefaultHandshakeTimeout = 30 * time.Second
	DefaultTurnDeadline     = 600 * time.Second
	// DefaultPostToolQuiet: every notification disarms the watch, and codex sends some at once
	// after a tool item completes, before its next model request: in
	// testdata/codex-wire/approval-declined.jsonl thread/status/changed follows the command's
	// item/completed within 0 ms and thread/tokenUsage/updated within 4 ms (same in the
	// approval e2e runs on real codex 0.169). A model thinking silently after that does not
	// trip it; the turn deadline bounds that. So the watch only catches a codex that went
	// silent right after a tool, and 90 s, four orders of magnitude over the gap, is kept: a
	// shorter one gains nothing a loaded machine cannot cost.
	DefaultPostToolQuiet = 90 * time.Second
	// DefaultModelUnreachable: codex retries an unreachable model forever (about 0, 7, 17, 37 s
	// after the first failure, and on), so without a bound every chat waited out the turn
	// deadline. Long enough for a blip (a proxy restart), short enough that a user hears.
	DefaultModelUnreachable    = 30 * time.Second
	DefaultCrashWindow         = 10 * time.Second
	DefaultCrashBackoffInitial = time.Second
	DefaultCrashBackoffMax     = 5 * time.Minute
	DefaultCrashLoopAfter      = 3
	DefaultSweepGrace          = 2 * time.Second
	// DefaultHostDrain: a shared child being recycled lets its chats' running turns finish for
	// this long; most turns on a mock or a warm model end in seconds, a long tool run is cut.
	DefaultHostDrain = time.Minute
	// hostUnloadTimeout bounds the wait for codex to unload a thread that leaves a shared
	// child (about 1 ms after thread/unsubscribe with thread_unload_delay_secs = 0).
	hostUnloadTimeout = 10 * time.Second
	// unloadAtOnce is the children's setting when they host several chats' threads: a thread
	// that leaves (eviction, idle, a recycled child) is unloaded at once, not after codex's
	// default 60 s. Its memory is what the eviction is for, and its chat's next child can
	// resume it only once it is unloaded (one writer); a thread that is merely idle stays
	// subscribed and loaded, so the delay would buy nothing.
	unloadAtOnce = "thread_unload_delay_secs=0"
	// sharedTokenPushWait bounds how long a new ChatGPT token waits for a moment when none of
	// a shared child's turns runs (appserver.Config.TokenPushWait): codexauth renews a token
	// minutes ahead of its expiry, so the old one still works meanwhile.
	sharedTokenPushWait = 30 * time.Second

	// DefaultMaxChildren is the default hard cap on live children. The memory budget decides how
	// many children fit; this cap bounds what the budget does not see. A codex child measured 19
	// threads and holds 4 descriptors in the daemon (3 pipes and a pidfd), so 256 children are
	// ~4,900 threads and ~1,000 descriptors. At the 53 MB PSS of a warm child 256 children are
	// 13.5 GB, so below ~27 GB of MemAvailable the default budget binds first.
	DefaultMaxChildren = 256

	// DefaultMemoryBudgetFraction is the share of MemAvailable (read once, in New) that the
	// default Config.MemoryBudget gives the children's summed PSS. Half, because PSS is not all a
	// chat costs: the commands a turn runs (builds, test runs) are processes of their own that the
	// budget does not count, children grow between two samples, and the daemon and the rest of
	// the machine need room too.
	DefaultMemoryBudgetFraction = 0.5
	// DefaultChildEstimate is what a new child is expected to cost before any child of the pool
	// was measured: a warm native codex app-server after a few turns measured PSS 53 MB
	// (VmRSS 148 MB, private 25 MB; 4 children, codex 0.169.0, docs/PROTOCOL.md). Measured again
	// for this default: 42–44 MB PSS, 22–24 MB private, 141 MB RSS (4 children, 3 turns each);
	// the higher figure is kept, as an estimate should err high.
	DefaultChildEstimate = 53 << 20
	// DefaultChildMemoryLimit is the daemon's default of Config.ChildMemoryLimit (the library's
	// is off): 2 GiB of private memory, 80× the 25 MB of a warm child (docs/PROTOCOL.md). codex
	// children have been seen to grow to 10–40 GB in long use (openai/codex #29510, #34863); a
	// leaking child passes 2 GiB long before that, while a healthy child with a long thread stays
	// far below it, so it is not recycled after every turn.
	DefaultChildMemoryLimit = 2 << 30
	// DefaultMemorySampleInterval is how often the children's memory is read. One smaps_rollup
	// read walks the child's page tables (well under a millisecond for a warm child), so even a
	// full pool costs little; children grow over minutes, not seconds.
	DefaultMemorySampleInterval = 5 * time.Second

	// ChildrenFile is the file in Config.StateDir that records live children for the boot sweep.
	ChildrenFile = "children.json"
)

// Config configures a Supervisor. Zero values mean the documented default; a negative duration
// disables that timer where noted.
type Config struct {
	// Spawn starts a child for a chat key. Nil means appserver.Start with AppServer (its logger
	// gains a chat_key field and its HandshakeTimeout defaults to HandshakeTimeout). A spare is
	// spawned for chat key ""; when a chat takes it, a child with a SetLogger(*zap.Logger)
	// method is given AppServer.Logger (else Logger) with that chat's chat_key.
	Spawn SpawnFunc
	// AppServer is the template for the default Spawn. AppServer.Bin is required when Spawn is nil.
	AppServer appserver.Config
	// Store maps chat keys to codex thread ids so a new child resumes the conversation. Nil means
	// an in-memory map: conversations survive child restarts but not a daemon restart.
	Store ThreadStore
	// TurnModel gives every turn of a chat its model and effort, ForgetSettings drops an archived
	// chat's (package chatsettings; nil: none); New binds Jobs, /compact and /undo (chatjobs.go).
	TurnModel      func(chatKey string) (model, effort string)
	ForgetSettings func(chatKey string) error
	Jobs           *chatjob.Jobs
	// Thread holds the options of thread/start and thread/resume.
	Thread appserver.ThreadOptions
	// StateDir holds ChildrenFile, the record of live children that the boot sweep of the next
	// daemon uses to kill orphans. Empty disables both. One daemon per StateDir.
	StateDir string

	// MaxChildren is the hard cap on live children (starting, idle, busy and retiring all
	// count). Default DefaultMaxChildren; the memory budget usually binds first.
	MaxChildren int
	// ThreadsPerChild is how many chats' threads share one codex child (hosts.go). 1, the
	// default, is one child per chat. With N > 1: MaxChildren still caps the children, so up to
	// MaxChildren × N chats are warm (a slot is a thread); each thread is charged its child's
	// PSS divided by the threads in it, and the estimate is the mean of those shares; a spare
	// is a thread opened ahead in a child with room; ChildMemoryLimit, ChildMaxAge and
	// ChildMaxTurns recycle a whole child (its turns summed); a crash counts against the chats
	// whose turns ran in it, and such a chat's next child is one of its own until a turn of it
	// completes.
	ThreadsPerChild int
	// HostDrain bounds how long a shared child that stopped taking threads (recycling, a wedged
	// thread) waits for its chats' running turns to end before they are interrupted. Default
	// DefaultHostDrain.
	HostDrain time.Duration

	// Spares is how many spare children to keep: spawned, initialized and holding a thread
	// started in advance, bound to no chat key (see spares.go). They count against MaxChildren.
	// Zero: none.
	Spares int
	// MemoryBudget bounds the sum of the children's PSS, in bytes. A new child starts only while
	// the pool's memory (each child's latest PSS reading, or the per-child estimate for a child
	// not measured yet) plus the estimate for one more child fits; otherwise the least recently
	// used idle child is evicted, otherwise the message waits for a slot (SlotWait). The estimate
	// is the mean PSS of the measured children that ran a turn, DefaultChildEstimate before
	// there is one. The pool always admits one child, whatever the budget. Default:
	// DefaultMemoryBudgetFraction of MemAvailable, read in New (none when it cannot be read);
	// negative: no budget, only MaxChildren.
	MemoryBudget int64
	// MemorySampleInterval is how often every child's memory is read (Memory) for the budget
	// and the recycling below. Default DefaultMemorySampleInterval; negative: never (the budget
	// then charges every child the estimate, and only ChildMaxTurns and ChildMaxAge recycle, at
	// the end of a turn).
	MemorySampleInterval time.Duration
	// Retention is the archive log (threads-archive.jsonl): a chat whose thread it holds as
	// archived is unarchived when it comes back, and ArchiveSweep works (nil: neither).
	// RetentionPolicy is what the periodic sweep does every RetentionEvery (default
	// DefaultRetentionEvery); a zero policy runs no periodic sweep (retention.go).
	Retention       *retention.Log
	RetentionPolicy retention.Policy
	RetentionEvery  time.Duration
	// WorkDir holds the chats' folders (chatfiles): a chat's uploads go when its thread is
	// deleted, and all uploads past RetentionPolicy.UploadsAfter; empty: uploads are left alone.
	WorkDir string
	// Memory reads a child's memory. Default childproc.ProcFS{}.Memory; tests fake it.
	Memory func(pid int) (childproc.Memory, error)
	// ChildMemoryLimit recycles a child whose private memory (USS) passed it, in bytes: an idle
	// child is retired at the sample that sees it (reason ReasonMemory), a busy one when its turn
	// ends. The chat's next message resumes the thread in a new child. Zero: off.
	ChildMemoryLimit int64
	// CompactAfterTurns compacts a chat's thread (codex's thread/compact/start) before the turn
	// that follows this many turns in one child since it opened or last compacted the thread;
	// CompactAboveBytes before the turn of a child whose private memory (USS) passed it, once per
	// child. 0: off (compact.go).
	CompactAfterTurns int
	CompactAboveBytes int64
	// ChildMaxAge recycles a child older than this (reason ReasonMaxAge): an idle one at the next
	// memory sample, a busy one when its turn ends. Zero: off.
	ChildMaxAge time.Duration
	// ChildMaxTurns recycles a child once it ran this many turns (reason ReasonMaxTurns), as its
	// last turn ends. Zero: off.
	ChildMaxTurns int
	// Busy says what happens to a message for a chat key whose turn is running: BusyQueue
	// (default), BusySteer or BusyInterrupt.
	Busy BusyPolicy
	// MaxImagePixels is the largest inline image, in pixels, codex is given; a larger one, or one
	// whose size cannot be read from its header, is left out of the message and the chat is told
	// (Reply.Notices). Default DefaultMaxImagePixels; negative: no limit.
	MaxImagePixels int64
	// MaxQueuePerKey bounds the messages of one chat key waiting behind its running turn; past
	// it Submit returns ErrQueueFull at once. Default DefaultMaxQueuePerKey (16).
	MaxQueuePerKey int
	// IdleTTL closes a child idle for this long (reason "idle"). Default 15 min; negative: never.
	IdleTTL time.Duration
	// SlotWait bounds how long a chat key without a child waits for a slot when every slot is
	// busy; then Submit returns ErrNoSlot. Default DefaultSlotWait (30 s).
	SlotWait time.Duration
	// MaxSlotWaiters bounds the chat keys waiting for a slot at once; past it Submit returns
	// ErrNoSlot at once. Default DefaultMaxSlotWaiters.
	MaxSlotWaiters int

	// HandshakeTimeout bounds spawn + handshake, and separately thread start/resume
	// (WatchdogHandshake). Default 30 s.
	HandshakeTimeout time.Duration
	// TurnDeadline bounds one turn (WatchdogTurn): the turn is interrupted; a child that does not
	// settle within the interrupt grace is retired (WatchdogWedged). Default 600 s; negative:
	// none.
	TurnDeadline time.Duration
	// PostToolQuiet retires a child that went silent this long after a tool item
	// (commandExecution, fileChange, mcpToolCall, dynamicToolCall) completed (WatchdogPostTool).
	// Default 90 s; negative: none. Every notification of the thread counts as activity, and
	// the watch is paused while the thread waits on a person (see turnWatch).
	PostToolQuiet time.Duration
	// ModelUnreachable ends a turn whose model could not be reached for this long
	// (WatchdogModelUnreachable): codex said so (appserver.ModelUnreachable) and nothing came from
	// the model since. The child stays. While the model is known unreachable, a turn ends at
	// codex's first such report, so each message costs a connection attempt, not the wait; a
	// model that answers ends the outage. A model that answers slowly is never cut by it.
	// Default DefaultModelUnreachable; negative: off.
	ModelUnreachable time.Duration
	// ModelSilent ends a turn whose model sent nothing this long from the turn's start (a model
	// endpoint that accepts and never answers; codex waits on it for good) as
	// WatchdogModelUnreachable. Zero or negative: off (the daemon's flag defaults to
	// DefaultModelSilent).
	ModelSilent time.Duration
	// ApprovalTimeout is how long an approval asked in the chat (appserver.DecisionAsk) waits
	// for /approve or /deny before it is declined. Default DefaultApprovalTimeout.
	ApprovalTimeout time.Duration
	// ResumeSpacing paces the work parked by a usage limit (AwaitUsable) at its reset: one
	// message every ResumeSpacing, oldest first. Default DefaultResumeSpacing.
	ResumeSpacing time.Duration
	// InterruptGrace is passed to appserver.TurnOptions. Zero: appserver's default (5 s).
	InterruptGrace time.Duration

	// CrashWindow: a child that dies within this long of its start without having completed a
	// turn counts as a crash, as does a failed spawn or thread start/resume. Crashes back a chat
	// key off exponentially (CrashBackoffInitial, ×1.5 with ±50% jitter, up to CrashBackoffMax,
	// never giving up). A completed turn resets it. While fewer than CrashLoopAfter crashes came
	// in a row, the chat's next message waits out the backoff and tries again; from then on its
	// messages get *CrashLoopError during the backoff instead of waiting.
	// A child that completed a turn and then died is not a crash. Default 10 s; negative: only
	// children that never got ready count.
	CrashWindow time.Duration
	// CrashBackoffInitial is the first backoff interval. Default 1 s.
	CrashBackoffInitial time.Duration
	// CrashBackoffMax caps the backoff interval. Default 5 min.
	CrashBackoffMax time.Duration
	// CrashLoopAfter is how many crashes in a row make a crash loop. One crash (a child killed
	// by the OOM killer in its first turn, say) must not turn a chat's whole backlog into error
	// replies. Default DefaultCrashLoopAfter (3).
	CrashLoopAfter int

	// Admit, when set, is asked before each message is queued. A non-nil error is returned by
	// Submit at once, wrapped with the chat key, and no child is started for the message: the
	// daemon refuses messages this way while codex is not logged in. It is called concurrently
	// and must return promptly.
	Admit func(ctx context.Context, chatKey string) error

	// OnTurn, when set, is called once per message as its reply is returned (by Submit, or by
	// Ticket.Wait after Enqueue; also for a Submit refused before its message was queued), on
	// the caller's goroutine. It must return promptly. The daemon records turn metrics with it.
	OnTurn func(TurnEvent)

	// SweepGrace is how long the boot sweep waits after SIGTERM and again after SIGKILL for an
	// orphan to go. Default 2 s.
	SweepGrace time.Duration

	// Logger receives the supervisor's logs (named "supervisor"). Nil: no logs.
	Logger *zap.Logger
	// Adopted are the idle children the previous image of the daemon handed over when it
	// re-executed itself (Freeze): New registers them as their chats' warm children, and the boot
	// sweep leaves them alone.
	Adopted []AdoptedChild
}

// withDefaults returns cfg with zero fields set to their defaults.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.MaxChildren < 0 || cfg.MaxQueuePerKey < 0 || cfg.Spares < 0 {
		return cfg, fmt.Errorf("supervisor: MaxChildren %d, MaxQueuePerKey %d and Spares %d must not be negative",
			cfg.MaxChildren, cfg.MaxQueuePerKey, cfg.Spares)
	}
	busy, err := ParseBusyPolicy(string(cfg.Busy))
	if err != nil {
		return cfg, fmt.Errorf("supervisor: %w", err)
	}
	cfg.Busy = busy
	if cfg.MaxChildren == 0 {
		cfg.MaxChildren = DefaultMaxChildren
	}
	if cfg.ThreadsPerChild < 0 {
		return cfg, fmt.Errorf("supervisor: ThreadsPerChild %d must not be negative", cfg.ThreadsPerChild)
	}
	if cfg.ThreadsPerChild == 0 {
		cfg.ThreadsPerChild = 1
	}
	if cfg.ThreadsPerChild > 1 {
		cfg.AppServer.ConfigOverrides = append(append([]string(nil), cfg.AppServer.ConfigOverrides...), unloadAtOnce)
		if cfg.AppServer.TokenPushWait == 0 {
			cfg.AppServer.TokenPushWait = sharedTokenPushWait
		}
	}
	if cfg.HostDrain <= 0 {
		cfg.HostDrain = DefaultHostDrain
	}
	if cfg.CompactAfterTurns < 0 || cfg.CompactAboveBytes < 0 {
		return cfg, fmt.Errorf("supervisor: CompactAfterTurns %d and CompactAboveBytes %d must not be negative",
			cfg.CompactAfterTurns, cfg.CompactAboveBytes)
	}
	if cfg.ChildMemoryLimit < 0 || cfg.ChildMaxAge < 0 || cfg.ChildMaxTurns < 0 {
		return cfg, fmt.Errorf("supervisor: ChildMemoryLimit %d, ChildMaxAge %s and ChildMaxTurns %d must not be negative",
			cfg.ChildMemoryLimit, cfg.ChildMaxAge, cfg.ChildMaxTurns)
	}
	if cfg.Memory == nil {
		cfg.Memory = childproc.ProcFS{}.Memory
	}
	if cfg.CrashLoopAfter <= 0 {
		cfg.CrashLoopAfter = DefaultCrashLoopAfter
	}
	if cfg.MaxQueuePerKey == 0 {
		cfg.MaxQueuePerKey = DefaultMaxQueuePerKey
	}
	if cfg.MaxImagePixels == 0 {
		cfg.MaxImagePixels = DefaultMaxImagePixels
	}
	if cfg.MaxSlotWaiters <= 0 {
		cfg.MaxSlotWaiters = DefaultMaxSlotWaiters
	}
	setDur := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	setDur(&cfg.IdleTTL, DefaultIdleTTL)
	setDur(&cfg.SlotWait, DefaultSlotWait)
	setDur(&cfg.HandshakeTimeout, DefaultHandshakeTimeout)
	setDur(&cfg.TurnDeadline, DefaultTurnDeadline)
	setDur(&cfg.PostToolQuiet, DefaultPostToolQuiet)
	setDur(&cfg.ModelUnreachable, DefaultModelUnreachable)
	setDur(&cfg.ResumeSpacing, DefaultResumeSpacing)
	if cfg.ApprovalTimeout <= 0 {
		cfg.ApprovalTimeout = DefaultApprovalTimeout
	}
	setDur(&cfg.CrashWindow, DefaultCrashWindow)
	setDur(&cfg.CrashBackoffInitial, DefaultCrashBackoffInitial)
	setDur(&cfg.CrashBackoffMax, DefaultCrashBackoffMax)
	setDur(&cfg.SweepGrace, DefaultSweepGrace)
	setDur(&cfg.MemorySampleInterval, DefaultMemorySampleInterval)
	if cfg.SlotWait < 0 || cfg.HandshakeTimeout < 0 {
		return cfg, fmt.Errorf("supervisor: SlotWait %s and HandshakeTimeout %s must not be negative",
			cfg.SlotWait, cfg.HandshakeTimeout)
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Store == nil {
		cfg.Store = &memStore{m: make(map[string]string)}
	}
	// New makes the default Spawn: it counts the children's overload retries in the Supervisor.
	if cfg.Spawn == nil && cfg.AppServer.Bin == "" {
		return cfg, fmt.Errorf("supervisor: AppServer.Bin is required when Spawn is nil")
	}
	return cfg, nil
}

// appServerSpawn is the default SpawnFunc: appserver.Start with the template. onOverloadRetry
// hears of every request a child retried, after the template's own OnOverloadRetry.
func appServerSpawn(tmpl appserver.Config, handshake time.Duration, log *zap.Logger, onOverloadRetry func(method string)) SpawnFunc {
	if own := tmpl.OnOverloadRetry; own != nil {
		tmpl.OnOverloadRetry = func(method string) {
			own(method)
			onOverloadRetry(method)
		}
	} else {
		tmpl.OnOverloadRetry = onOverloadRetry
	}
	return func(ctx context.Context, chatKey string) (Child, error) {
		c := tmpl
		if c.HandshakeTimeout == 0 {
			c.HandshakeTimeout = handshake
		}
		c.Logger = childLogger(tmpl.Logger, log, chatKey)
		cl, err := appserver.Start(ctx, c)
		if err != nil {
			// A nil *Client in a Child interface would not compare equal to nil.
			return nil, err
		}
		return cl, nil
	}
}

// childLogger is the logger a child of chatKey logs with: the AppServer template's, else the
// supervisor's, with the chat key; a spare (chatKey "") has none until a chat takes it.
func childLogger(tmpl, log *zap.Logger, chatKey string) *zap.Logger {
	base := tmpl
	if base == nil {
		base = log
	}
	if chatKey == "" {
		return base
	}
	return base.With(zap.String("chat_key", chatKey))
}

// logRelabeler is a Child whose log lines can change logger (*appserver.Client): a spare,
// started for no chat, names the chat that takes it from then on.
type logRelabeler interface{ SetLogger(*zap.Logger) }

// The appserver client is the production logRelabeler.
var _ logRelabeler = (*appserver.Client)(nil)

// DefaultMemoryBudget is DefaultMemoryBudgetFraction of MemAvailable.
func DefaultMemoryBudget() (int64, error) {
	return MemoryBudgetOf(DefaultMemoryBudgetFraction)
}

// MemoryBudgetOf is fraction (0 < fraction <= 1) of MemAvailable, in bytes.
func MemoryBudgetOf(fraction float64) (int64, error) {
	if !(fraction > 0 && fraction <= 1) {
		return 0, fmt.Errorf("memory budget fraction %g: want more than 0 and at most 1", fraction)
	}
	avail, err := childproc.ProcFS{}.MemAvailable()
	if err != nil {
		return 0, fmt.Errorf("memory budget: %w", err)
	}
	return int64(float64(avail) * fraction), nil
}

// memStore is the ThreadStore used when Config.Store is nil.
type memStore struct {
	mu sync.Mutex
	m  map[string]string
}

func (s *memStore) Get(key string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[key]
	return v, ok
}

func (s *memStore) Set(key, threadID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[key] = threadID
	return nil
}

func (s *memStore) Archive(key, _ string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.m[key]
	delete(s.m, key)
	return id, nil
}

func (s *memStore) Delete(key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
	return nil
}
