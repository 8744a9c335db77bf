package supervisor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/supervisor/approvals"
	"github.com/molecule-ai/codex-warm/supervisor/hosts"
)

// A reload re-executes the daemon in place. Freeze waits until every chat is between turns or
// runs a turn that can cross (its messages have ids), then pauses every child at a message
// boundary, mid-turn or not, and returns them; the caller hands them to the next image, which
// gives them back through Config.Adopted and goes on with their turns. Thaw calls a reload off.

// ErrReloading is the error of a message that reached the supervisor while it was frozen for a
// reload: its inbox had stopped taking messages, so only a straggler meets it.
var ErrReloading = errors.New("the daemon is reloading")

// ErrCannotCross refuses a reload at once because a chat runs a turn that cannot be handed over
// while it runs (see table.neverCrosses): waiting for it would hold every other chat's messages
// for as long.
var ErrCannotCross = errors.New("a running turn cannot cross a reload")

// ErrHandedOver is the error of a message whose turn a reload handed to the next image of the
// daemon, or which waited behind such a turn: its caller stops waiting, and the same message
// given again (same Input.MessageID) attaches to the turn in the next image. Only messages with
// an id are handed over.
var ErrHandedOver = errors.New("the message's turn was handed to the reloaded daemon")

// errTurnEnded is Freeze's, within, when a running turn ended as its child paused: the freeze
// lets every child go and waits for quiet again. The turn's job still closes its books on the
// child (it may drop the unanswered turn from the thread, or retire the child), and its caller
// waits for that: paused, the child would hold the result until the reload is called off, and
// a caller the inboxes wait for before the exec would refuse the reload. The job is not handed
// over instead: its turn is over in codex, and its result is its caller's to deliver.
var errTurnEnded = errors.New("a running turn ended as its child paused")

// ReasonReload: a spare retired so that the daemon could reload (spares are not handed over).
const ReasonReload = "reload"

// HandedChild is one idle child of a chat, paused for the next image of the daemon.
type HandedChild struct {
	ChatKey  string
	ThreadID string
	Started  time.Time
	Turns    int
	Handover appserver.Handover
	// Turn is the chat's running turn, with Handover.Turn; nil for an idle child.
	Turn *HandedTurn
	// Shared are the other chats' threads in this child when it is shared
	// (Config.ThreadsPerChild > 1): it is handed over with all of them, their running turns
	// included.
	Shared []SharedThread
}

// SharedThread is one more chat's thread in a shared child that crosses a reload.
type SharedThread struct {
	ChatKey  string
	ThreadID string
	Started  time.Time
	Turns    int
	// Turn is the chat's running turn (the child's Handover.Turns holds its state); nil when
	// idle.
	Turn *HandedTurn
}

// HandedTurn is what the supervisor knows of a running turn that crosses a reload.
type HandedTurn struct {
	// MessageID is the message the turn answers (Input.MessageID).
	MessageID      string
	AskApprovalsOf string
	// Approvals are the Seq numbers of its approvals waiting for a person, by request id:
	// the next image publishes them with the same numbers.
	Approvals map[string]uint64
	// DeadlineLeft is what remained of the turn deadline (--turn-deadline) at the reload.
	DeadlineLeft time.Duration
	// Started is when the turn began; set on adoption (the previous image's clock).
	Started time.Time
}

// AdoptedChild is a child the previous image of the daemon handed over (see Freeze), ready to
// run its chat's next turn on ThreadID.
type AdoptedChild struct {
	ChatKey  string
	ThreadID string
	Started  time.Time
	Turns    int
	Child    Child
	// Turn is the running turn handed over with the child (the child's ResumeTurn goes on
	// with it); nil for an idle child.
	Turn *HandedTurn
	// Shared are the other chats' threads in the child (see HandedChild.Shared).
	Shared []SharedThread
}

// pausable is a Child that can be handed over: the appserver client.
type pausable interface {
	Pause(ctx context.Context) (appserver.Handover, error)
	Resume()
}

// runningPausable is a Child whose running turn can be handed over.
type runningPausable interface {
	PauseRunning(ctx context.Context) (appserver.Handover, error)
}

// resumable is a Child that goes on with a turn handed over by the previous image.
type resumable interface {
	ResumeTurn(ctx context.Context, opts appserver.TurnOptions) (*appserver.TurnResult, error)
}

// handover is the reload's part: Freeze, Thaw and the adoption of the children a previous image
// handed over (adopt.go). What it decides it decides in the state table (the freeze's state,
// the sessions, the queues), through stateTable.do; the pausing and the waiting run outside.
type handover struct {
	handoverDeps // what it is handed; it keeps no state of its own: the freeze is the table's
}

// handoverDeps is what New hands the handover.
type handoverDeps struct {
	log       *zap.Logger
	st        *stateTable
	pool      *pool
	hosts     *hosts.Pool // the shared children; nil with a child per chat
	approvals *approvals.Board
}

func newHandover(d handoverDeps) *handover { return &handover{handoverDeps: d} }

// Freeze waits, until ctx is done, for every starting child to be ready and for every running
// turn that cannot cross (see table.handable) to finish; spares are retired. Then it refuses
// new messages (ErrReloading), pauses every child, idle or mid-turn, and returns them. The
// callers of the running turns it hands over, and of the messages queued behind them, get
// ErrHandedOver; those turns no longer end with their callers' contexts. A turn that ends as
// its child pauses is not handed over: Freeze lets every child go, the turn's job finishes as
// it would (its caller gets its result), and the wait for quiet starts again. The caller must
// stop its inboxes first, or Freeze may wait for ever-new work until ctx ends. On error the
// supervisor runs on as before; after success, Thaw undoes it (a handed-over turn then waits
// for its message to be given again).
func (s *Supervisor) Freeze(ctx context.Context) ([]HandedChild, error) {
	return s.handover.freeze(ctx)
}

// Thaw calls off a reload after Freeze: the children go on and messages are taken again.
func (s *Supervisor) Thaw() { s.handover.thaw() }

// frozen is what one Freeze paused so far: the children, as handed over, and the jobs of the
// running turns it handed over.
type frozen struct {
	out    []HandedChild
	paused []pausable
	handed []*job
}

func (h *handover) freeze(ctx context.Context) ([]HandedChild, error) {
	var err error
	if h.st.do(func(t *table) { err = t.beginFreeze() }); err != nil {
		return nil, err
	}
	// ended are the running jobs whose turns ended as their children paused: waited for, as
	// any work, rather than handed over (see errTurnEnded).
	ended := make(map[*job]bool)
	for {
		out, err := h.tryFreeze(ctx, ended)
		if errors.Is(err, errTurnEnded) {
			continue // still frozen: messages stay refused while the job finishes
		}
		return out, err
	}
}

// tryFreeze waits for quiet and pauses every child. On errTurnEnded every child was let go and
// the freeze stands, for the next try; on any other error the freeze is called off.
func (h *handover) tryFreeze(ctx context.Context, ended map[*job]bool) ([]HandedChild, error) {
	idle, running, err := h.awaitQuiet(ctx, ended)
	if err != nil {
		h.st.do(func(t *table) { t.endFreeze(false) }) // frozen, too, by an earlier try
		h.pool.kickSpares()
		return nil, err
	}
	g := groupByChild(idle, running)
	var fz frozen
	err = h.pauseIdle(ctx, &fz, g.ownIdle)
	for _, host := range g.hosts {
		if err != nil {
			break
		}
		err = h.pauseHost(ctx, &fz, host, g.sharedIdle[host], g.sharedRunning[host], ended)
	}
	if err == nil {
		err = h.pauseRunning(ctx, &fz, g.ownRunning, ended)
	}
	if err != nil {
		for _, p := range fz.paused {
			p.Resume()
		}
		if !errors.Is(err, errTurnEnded) {
			h.st.do(func(t *table) { t.endFreeze(false) })
			h.pool.kickSpares()
		}
		return nil, err
	}
	h.st.do(func(t *table) { t.handOver(fz.paused, fz.handed, running) })
	h.log.Info("frozen for a reload", zap.Int("children", len(fz.out)), zap.Int("running_turns", len(fz.handed)))
	return fz.out, nil
}

func (h *handover) thaw() {
	var paused []pausable
	h.st.do(func(t *table) { paused = t.endFreeze(true) })
	for _, p := range paused {
		p.Resume()
	}
	h.pool.kickSpares()
	h.log.Info("reload called off; serving on")
}

// awaitQuiet retires the spares and waits until every child is idle and ready, or runs a turn
// that can be handed over (its message and those queued behind it have ids, none was steered
// into it), or is retired and reaped; then the supervisor is frozen, and it returns the idle
// children and the running turns. Other work (a child starting, a message without an id, a job
// in ended closing its books) is waited for, as before.
func (h *handover) awaitQuiet(ctx context.Context, ended map[*job]bool) ([]*session, []runningTurn, error) {
	for {
		var q quiet
		h.st.do(func(t *table) {
			t.retireSpares(ReasonReload)
			q = t.lookQuiet(ended)
		})
		if len(q.cannot) > 0 {
			return nil, nil, fmt.Errorf("supervisor: %s: %w", joinFirst(q.cannot, 4), ErrCannotCross)
		}
		if len(q.busy) == 0 {
			return q.idle, q.running, nil
		}
		select {
		case <-q.changed:
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("supervisor: still busy (%s): %w", joinFirst(q.busy, 4), context.Cause(ctx))
		}
	}
}

// byChild is a freeze's sessions by child: a shared child is paused once and handed over with
// all its threads.
type byChild struct {
	ownIdle       []*session
	ownRunning    []runningTurn
	hosts         []*hosts.Host // in the order their sessions came
	sharedIdle    map[*hosts.Host][]*session
	sharedRunning map[*hosts.Host][]runningTurn
}

func groupByChild(idle []*session, running []runningTurn) byChild {
	g := byChild{sharedIdle: make(map[*hosts.Host][]*session), sharedRunning: make(map[*hosts.Host][]runningTurn)}
	for _, sess := range idle {
		if sess.host == nil {
			g.ownIdle = append(g.ownIdle, sess)
			continue
		}
		if g.sharedIdle[sess.host] == nil {
			g.hosts = append(g.hosts, sess.host)
		}
		g.sharedIdle[sess.host] = append(g.sharedIdle[sess.host], sess)
	}
	for _, r := range running {
		host := r.sess.host
		if host == nil {
			g.ownRunning = append(g.ownRunning, r)
			continue
		}
		if g.sharedIdle[host] == nil && g.sharedRunning[host] == nil {
			g.hosts = append(g.hosts, host)
		}
		g.sharedRunning[host] = append(g.sharedRunning[host], r)
	}
	return g
}

// pauseIdle pauses the idle children of their own chats. One that died meanwhile is left out:
// the next image does without it.
func (h *handover) pauseIdle(ctx context.Context, fz *frozen, idle []*session) error {
	for _, sess := range idle {
		p, ok := sess.child.(pausable)
		if !ok {
			return fmt.Errorf("chat %s: codex pid %d: %w", sess.key.key, sess.pid, appserver.ErrNoHandover)
		}
		ho, err := p.Pause(ctx)
		if err != nil {
			if sess.child.Err() != nil {
				continue // it died meanwhile
			}
			return fmt.Errorf("chat %s: %w", sess.key.key, err)
		}
		fz.paused = append(fz.paused, p)
		var hc HandedChild
		h.st.do(func(*table) { hc = handedChild(sess, ho) })
		fz.out = append(fz.out, hc)
	}
	return nil
}

// handedChild describes sess's child as handed over; it reads the session's books, which
// change under the table's lock.
func handedChild(sess *session, ho appserver.Handover) HandedChild {
	return HandedChild{ChatKey: sess.key.key, ThreadID: sess.threadID, Started: sess.started, Turns: sess.turns, Handover: ho}
}

// pauseHost pauses a shared child with its threads (pauseShared).
func (h *handover) pauseHost(ctx context.Context, fz *frozen, host *hosts.Host, idle []*session, running []runningTurn, ended map[*job]bool) error {
	hc, jobs, err := h.pauseShared(ctx, host, idle, running, ended)
	if err != nil {
		return err
	}
	if hc.Handover.PID == 0 {
		return nil // it died meanwhile
	}
	fz.paused = append(fz.paused, host.Child().(pausable))
	fz.out = append(fz.out, hc)
	fz.handed = append(fz.handed, jobs...)
	return nil
}

// pauseRunning pauses the children of their own chats that run a turn, with the turn. A turn
// that ended as its child paused joins ended (errTurnEnded).
func (h *handover) pauseRunning(ctx context.Context, fz *frozen, running []runningTurn, ended map[*job]bool) error {
	for _, r := range running {
		sess := r.sess
		rp, ok := sess.child.(runningPausable)
		p, ok2 := sess.child.(pausable)
		if !ok || !ok2 {
			return fmt.Errorf("chat %s: codex pid %d: %w", sess.key.key, sess.pid, appserver.ErrNoHandover)
		}
		ho, err := rp.PauseRunning(ctx)
		if err != nil {
			return fmt.Errorf("chat %s: running turn: %w", sess.key.key, err)
		}
		fz.paused = append(fz.paused, p)
		if ho.Turn == nil {
			ended[r.job] = true
			return errTurnEnded
		}
		// The turn's goroutine may be closing its books on the session meanwhile.
		var hc HandedChild
		h.st.do(func(*table) { hc = handedChild(sess, ho) })
		hc.Turn = &HandedTurn{MessageID: r.job.messageID, AskApprovalsOf: r.job.opts.askApprovalsOf,
			Approvals: h.approvals.SeqsOf(sess.key.key), DeadlineLeft: r.live.watch.LeftNow()}
		fz.handed = append(fz.handed, r.job)
		fz.out = append(fz.out, hc)
	}
	return nil
}

// pauseShared pauses the shared child host for a reload, whose threads are the idle sessions idle and the
// sessions whose turns run, and describes it: the first session's chat is the child's, the
// others are Shared; each running turn travels with its chat (jobs are their jobs). A child
// that died meanwhile yields a zero Handover (the next image does without it).
func (h *handover) pauseShared(ctx context.Context, host *hosts.Host, idle []*session, running []runningTurn, ended map[*job]bool) (HandedChild, []*job, error) {
	p, ok := host.Child().(pausable)
	rp, ok2 := host.Child().(runningPausable)
	if !ok || !ok2 && len(running) > 0 {
		return HandedChild{}, nil, fmt.Errorf("shared codex pid %d: %w", host.PID(), appserver.ErrNoHandover)
	}
	ss := append([]*session(nil), idle...)
	for _, r := range running {
		ss = append(ss, r.sess)
	}
	if n := h.hosts.Threads(host); n != len(ss) {
		// A thread of the child is not a chat's that can cross (a spare's, one leaving):
		// awaitQuiet waits those out, so this is a bug rather than a state to hand over.
		return HandedChild{}, nil, fmt.Errorf("shared codex pid %d holds %d threads, %d of them chats' that can cross", host.PID(), n, len(ss))
	}
	var ho appserver.Handover
	var err error
	if len(running) > 0 {
		ho, err = rp.PauseRunning(ctx)
	} else {
		ho, err = p.Pause(ctx)
	}
	if err != nil {
		if host.Child().Err() != nil {
			return HandedChild{}, nil, nil
		}
		return HandedChild{}, nil, fmt.Errorf("shared codex pid %d: %w", host.PID(), err)
	}
	turns := make(map[string]bool)
	if ho.Turn != nil {
		turns[ho.Turn.ThreadID] = true
	}
	for _, th := range ho.Turns {
		turns[th.ThreadID] = true
	}
	run := make(map[*session]runningTurn, len(running))
	over := false
	for _, r := range running {
		run[r.sess] = r
		if !turns[r.sess.threadID] {
			ended[r.job], over = true, true
		}
	}
	if over {
		p.Resume() // see errTurnEnded
		return HandedChild{}, nil, errTurnEnded
	}
	var jobs []*job
	turnOf := func(sess *session) *HandedTurn {
		r, ok := run[sess]
		if !ok {
			return nil // idle
		}
		jobs = append(jobs, r.job)
		return &HandedTurn{MessageID: r.job.messageID, AskApprovalsOf: r.job.opts.askApprovalsOf,
			Approvals: h.approvals.SeqsOf(sess.key.key), DeadlineLeft: r.live.watch.LeftNow()}
	}
	var hc HandedChild
	h.st.do(func(*table) { hc = sharedHanded(ss, ho, turnOf) })
	return hc, jobs, nil
}

// sharedHanded describes a shared child, whose threads are ss, as handed over; it reads the
// sessions' books, which change under the table's lock.
func sharedHanded(ss []*session, ho appserver.Handover, turnOf func(*session) *HandedTurn) HandedChild {
	first := ss[0]
	hc := HandedChild{ChatKey: first.key.key, ThreadID: first.threadID, Started: first.started, Turns: first.turns,
		Handover: ho, Turn: turnOf(first)}
	for _, o := range ss[1:] {
		hc.Shared = append(hc.Shared, SharedThread{ChatKey: o.key.key, ThreadID: o.threadID, Started: o.started,
			Turns: o.turns, Turn: turnOf(o)})
	}
	return hc
}
