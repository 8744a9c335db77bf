package supervisor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/childproc"
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
// while it runs (see neverCrossesLocked): waiting for it would hold every other chat's messages
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

// Freeze waits, until ctx is done, for every starting child to be ready and for every running
// turn that cannot cross (see handableLocked) to finish; spares are retired. Then it refuses
// new messages (ErrReloading), pauses every child, idle or mid-turn, and returns them. The
// callers of the running turns it hands over, and of the messages queued behind them, get
// ErrHandedOver; those turns no longer end with their callers' contexts. A turn that ends as
// its child pauses is not handed over: Freeze lets every child go, the turn's job finishes as
// it would (its caller gets its result), and the wait for quiet starts again. The caller must
// stop its inboxes first, or Freeze may wait for ever-new work until ctx ends. On error the
// supervisor runs on as before; after success, Thaw undoes it (a handed-over turn then waits
// for its message to be given again).
func (s *Supervisor) Freeze(ctx context.Context) ([]HandedChild, error) {
	s.mu.Lock()
	if s.pool.closedLocked() {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	if s.handover.freezing {
		s.mu.Unlock()
		return nil, errors.New("supervisor: already frozen")
	}
	s.handover.freezing = true
	s.mu.Unlock()
	// ended are the running jobs whose turns ended as their children paused: waited for, as
	// any work, rather than handed over (see errTurnEnded).
	ended := make(map[*job]bool)
again:
	idle, running, err := s.awaitQuiet(ctx, ended)
	if err != nil {
		s.mu.Lock()
		s.handover.freezing, s.handover.frozen = false, false // frozen by an earlier try (again)
		s.mu.Unlock()
		s.pool.kickSpares()
		return nil, err
	}
	var out []HandedChild
	var paused []pausable
	// A shared child is paused once and handed over with all its threads.
	shared := make(map[*hosts.Host][]*session)
	var sharedHosts []*hosts.Host
	for _, sess := range idle {
		if sess.host != nil {
			if shared[sess.host] == nil {
				sharedHosts = append(sharedHosts, sess.host)
			}
			shared[sess.host] = append(shared[sess.host], sess)
			continue
		}
		p, ok := sess.child.(pausable)
		if !ok {
			err = fmt.Errorf("chat %s: codex pid %d: %w", sess.key.key, sess.pid, appserver.ErrNoHandover)
			break
		}
		h, perr := p.Pause(ctx)
		if perr != nil {
			if sess.child.Err() != nil {
				// It died meanwhile: the next image does without it.
				continue
			}
			err = fmt.Errorf("chat %s: %w", sess.key.key, perr)
			break
		}
		paused = append(paused, p)
		s.mu.Lock()
		out = append(out, HandedChild{ChatKey: sess.key.key, ThreadID: sess.threadID, Started: sess.started,
			Turns: sess.turns, Handover: h})
		s.mu.Unlock()
	}
	var handed []*job
	sharedRunning := make(map[*hosts.Host][]runningTurn)
	for _, r := range running {
		if h := r.sess.host; h != nil {
			if shared[h] == nil && sharedRunning[h] == nil {
				sharedHosts = append(sharedHosts, h)
			}
			sharedRunning[h] = append(sharedRunning[h], r)
		}
	}
	for _, h := range sharedHosts {
		if err != nil {
			break
		}
		var hc HandedChild
		var jobs []*job
		if hc, jobs, err = s.pauseShared(ctx, h, shared[h], sharedRunning[h], ended); err != nil {
			break
		}
		if hc.Handover.PID == 0 {
			continue // it died meanwhile
		}
		paused = append(paused, h.Child().(pausable))
		out = append(out, hc)
		handed = append(handed, jobs...)
	}
	for _, r := range running {
		if err != nil {
			break
		}
		sess := r.sess
		if sess.host != nil {
			continue // handed over with its shared child
		}
		rp, ok := sess.child.(runningPausable)
		p, ok2 := sess.child.(pausable)
		if !ok || !ok2 {
			err = fmt.Errorf("chat %s: codex pid %d: %w", sess.key.key, sess.pid, appserver.ErrNoHandover)
			break
		}
		h, perr := rp.PauseRunning(ctx)
		if perr != nil {
			err = fmt.Errorf("chat %s: running turn: %w", sess.key.key, perr)
			break
		}
		paused = append(paused, p)
		if h.Turn == nil {
			ended[r.job] = true
			err = errTurnEnded
			break
		}
		// The turn's goroutine may be closing its books on the session meanwhile (under s.mu).
		s.mu.Lock()
		hc := HandedChild{ChatKey: sess.key.key, ThreadID: sess.threadID, Started: sess.started, Turns: sess.turns, Handover: h}
		s.mu.Unlock()
		hc.Turn = &HandedTurn{MessageID: r.job.messageID, AskApprovalsOf: r.job.askApprovalsOf,
			Approvals: s.approvals.seqsOf(sess.key.key), DeadlineLeft: r.live.watch.leftNow()}
		handed = append(handed, r.job)
		out = append(out, hc)
	}
	if err != nil {
		for _, p := range paused {
			p.Resume()
		}
		if errors.Is(err, errTurnEnded) {
			goto again // still frozen: messages stay refused while the job finishes
		}
		s.mu.Lock()
		s.handover.freezing, s.handover.frozen = false, false
		s.mu.Unlock()
		s.pool.kickSpares()
		return nil, err
	}
	s.mu.Lock()
	s.handover.paused = paused
	s.handover.handed = handed
	for _, j := range handed {
		// The caller stops waiting; the turn no longer ends with it.
		j.unlink()
		close(j.handed)
	}
	// Messages queued behind a handed-over turn have ids too (awaitQuiet): their inbox gives
	// them again, in order, to the next image.
	for _, r := range running {
		for _, q := range s.chats.takeQueuedLocked(r.sess.key.key) {
			close(q.handed)
		}
	}
	s.mu.Unlock()
	s.log.Info("frozen for a reload", zap.Int("children", len(out)), zap.Int("running_turns", len(handed)))
	return out, nil
}

// Thaw calls off a reload after Freeze: the children go on and messages are taken again.
func (s *Supervisor) Thaw() {
	s.mu.Lock()
	paused := s.handover.paused
	s.handover.paused = nil
	s.handover.freezing, s.handover.frozen = false, false
	for _, j := range s.handover.handed {
		// Its caller was told ErrHandedOver: the message given again attaches to it.
		s.handover.detach(j)
	}
	s.handover.handed = nil
	s.mu.Unlock()
	for _, p := range paused {
		p.Resume()
	}
	s.pool.kickSpares()
	s.log.Info("reload called off; serving on")
}

// freeze is the handover's state: a reload's freeze, the children it paused, the turns it
// handed over and those no caller waits for. It is guarded by Supervisor.mu (its decisions span
// the chats' keys, queues and sessions, which that lock guards), and touched only here: the
// rest of the supervisor asks it through its methods, with Supervisor.mu held.
type freeze struct {
	// freezing while Freeze waits for quiet, frozen once it refuses messages.
	freezing bool
	frozen   bool
	// paused are the children Freeze paused.
	paused []pausable
	// handed are the running jobs a freeze handed over (their callers were told
	// ErrHandedOver); detached are the jobs no caller waits for, by message id, which a
	// message of the same id attaches to (EnqueueInput): a turn handed over by the previous
	// image, or one whose reload was called off.
	handed   []*job
	detached map[string]*job
	// changed wakes Freeze's wait for quiet.
	changed chan struct{}
}

// refusing reports whether messages are refused (ErrReloading): frozen.
func (f *freeze) refusing() bool { return f.frozen }

// active reports whether a freeze began (spares are not started, maintenance is refused).
func (f *freeze) active() bool { return f.freezing || f.frozen }

// attach takes the detached job of messageID when it is chatKey's (nil otherwise).
func (f *freeze) attach(chatKey, messageID string) *job {
	d := f.detached[messageID]
	if messageID == "" || d == nil || d.key.key != chatKey {
		return nil
	}
	delete(f.detached, messageID)
	return d
}

// runningTurn is a chat's running turn that a reload can hand over.
type runningTurn struct {
	sess *session
	job  *job
	live *liveTurn
}

// awaitQuiet retires the spares and waits until every child is idle and ready, or runs a turn
// that can be handed over (its message and those queued behind it have ids, none was steered
// into it), or is retired and reaped; then it marks the supervisor frozen and returns the idle
// children and the running turns. Other work (a child starting, a message without an id, a job
// in ended closing its books) is waited for, as before.
func (s *Supervisor) awaitQuiet(ctx context.Context, ended map[*job]bool) ([]*session, []runningTurn, error) {
	for {
		s.mu.Lock()
		var busy, cannot []string
		var idle []*session
		var running []runningTurn
		s.pool.eachLocked(func(sess *session) {
			switch {
			case sess.spare && sess.state == StateSpare:
				s.pool.retireLocked(sess, ReasonReload, nil)
				busy = append(busy, "a spare retiring")
			case sess.spare:
				busy = append(busy, "a spare "+string(sess.state))
			case sess.state == StateIdle && !s.chats.busyLocked(sess.key.key):
				idle = append(idle, sess)
			case sess.state == StateBusy && !ended[sess.key.running] && handableLocked(s.chats.eachQueuedLocked, sess.key):
				running = append(running, runningTurn{sess: sess, job: sess.key.running, live: sess.key.live})
			case sess.state == StateBusy && neverCrossesLocked(s.chats.eachQueuedLocked, sess.key) != "":
				cannot = append(cannot, fmt.Sprintf("chat %s: %s", sess.key.key, neverCrossesLocked(s.chats.eachQueuedLocked, sess.key)))
			default:
				busy = append(busy, fmt.Sprintf("chat %s %s", sess.key.key, sess.state))
			}
		})
		s.chats.eachKeyLocked(func(k *keyState) {
			if s.chats.busyLocked(k.key) && (k.sess == nil || k.sess.state == StateIdle) {
				busy = append(busy, "chat "+k.key+" has work")
			}
		})
		if len(cannot) > 0 {
			s.mu.Unlock()
			return nil, nil, fmt.Errorf("supervisor: %s: %w", joinFirst(cannot, 4), ErrCannotCross)
		}
		if len(busy) == 0 {
			s.handover.frozen = true
			s.mu.Unlock()
			return idle, running, nil
		}
		changed := s.handover.changedCh()
		s.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("supervisor: still busy (%s): %w", joinFirst(busy, 4), context.Cause(ctx))
		}
	}
}

// handableLocked reports whether k's running turn can cross a reload.
func handableLocked(queued func(string, func(*job)), k *keyState) bool {
	j := k.running
	if j == nil || j.reset || j.messageID == "" || k.live == nil {
		return false
	}
	k.live.mu.Lock()
	steered := len(k.live.joined)
	k.live.mu.Unlock()
	if steered > 0 {
		return false
	}
	ok := true
	queued(k.key, func(q *job) {
		if q.messageID == "" || q.reset {
			ok = false
		}
	})
	return ok
}

// neverCrossesLocked says why k's running turn cannot be handed over for as long as it runs
// (its message, or one queued behind it, has no id the inbox could give again, or is a /new, or
// a message was steered into it); "" when it can, or may once its turn id is known.
func neverCrossesLocked(queued func(string, func(*job)), k *keyState) string {
	j := k.running
	if j == nil {
		return ""
	}
	switch {
	case j.reset:
		return "a new session is being started"
	case j.messageID == "":
		return "its caller cannot be handed over (an event stream, or a message without an id)"
	}
	if k.live != nil {
		k.live.mu.Lock()
		steered := len(k.live.joined)
		k.live.mu.Unlock()
		if steered > 0 {
			return "a message was steered into its turn"
		}
	}
	why := ""
	queued(k.key, func(q *job) {
		if why == "" && (q.messageID == "" || q.reset) {
			why = "a message queued behind its turn cannot be handed over"
		}
	})
	return why
}

// detach keeps j for the message that attaches to it (EnqueueInput).
func (f *freeze) detach(j *job) {
	if f.detached == nil {
		f.detached = make(map[string]*job)
	}
	f.detached[j.messageID] = j
}

// changedCh returns a channel closed at the next change of a child's state or of a chat's work
// (notify).
func (f *freeze) changedCh() <-chan struct{} {
	if f.changed == nil {
		f.changed = make(chan struct{})
	}
	return f.changed
}

// notify wakes Freeze's wait for quiet.
func (f *freeze) notify() {
	if f.changed != nil {
		close(f.changed)
		f.changed = nil
	}
}

func joinFirst(items []string, n int) string {
	out := ""
	for i, it := range items {
		if i == n {
			return fmt.Sprintf("%s and %d more", out, len(items)-n)
		}
		if i > 0 {
			out += ", "
		}
		out += it
	}
	return out
}

// adoptTurnLocked makes the running turn handed over with k's child k's first job: its message
// attaches to it when its inbox gives it again, and the messages after it queue behind.
func (f *freeze) adoptTurnLocked(push func(string, *job), approvals *approvalBoard, k *keyState, t *HandedTurn) {
	approvals.keep(k.key, t.Approvals)
	j := &job{key: k, ctx: context.Background(), askApprovalsOf: t.AskApprovalsOf, done: make(chan outcome, 1),
		messageID: t.MessageID, handed: make(chan struct{}), adopted: true, deadlineLeft: t.DeadlineLeft, turnStarted: t.Started}
	if j.messageID != "" {
		f.detach(j)
	}
	push(k.key, j)
}

// adoptedLocked makes sess, whose child the previous image handed over, k's idle session on
// threadID (with the turns it ran and when it started, and its running turn when it had one),
// unlocks s.mu and starts its watcher.
func (s *Supervisor) adoptedLocked(k *keyState, sess *session, threadID string, turns int, started time.Time, turn *HandedTurn) {
	sess.threadID, sess.recorded, sess.ready = threadID, true, true
	sess.turns = turns
	if !started.IsZero() {
		sess.started = started
	}
	s.pool.setStateLocked(sess, StateIdle)
	if turn != nil {
		s.handover.adoptTurnLocked(s.chats.pushLocked, s.approvals, k, turn)
	}
	s.mu.Unlock()
	s.pool.startWatcher(sess)
}

// adopt registers the children the previous image handed over as idle sessions of their chats.
// One that finds no slot (the new image allows fewer children) is closed.
func (s *Supervisor) adopt(children []AdoptedChild) {
	for _, a := range children {
		if len(a.Shared) > 0 {
			s.adoptShared(a)
			continue
		}
		s.mu.Lock()
		if !s.pool.takeSlotLocked() {
			s.mu.Unlock()
			s.log.Warn("no slot for a handed-over child; closing it", zap.String("chat_key", a.ChatKey), zap.Int("pid", a.Child.PID()))
			_ = a.Child.Close()
			continue
		}
		k := s.chats.keyLocked(a.ChatKey)
		sess := s.pool.newSessionLocked(k, s.log.With(zap.String("chat_key", a.ChatKey), zap.Int("pid", a.Child.PID()),
			zap.String("thread_id", a.ThreadID)))
		k.sess = sess
		sess.child, sess.pid, sess.proc = a.Child, a.Child.PID(), childproc.ReadIdentity(a.Child.PID())
		s.adoptedLocked(k, sess, a.ThreadID, a.Turns, a.Started, a.Turn)
		sess.log.Info("codex child adopted from the previous image; its chat stays warm", zap.Bool("running_turn", a.Turn != nil))
	}
}

// pauseShared pauses host h for a reload, whose threads are the idle sessions idle and the
// sessions whose turns run, and describes it: the first session's chat is the child's, the
// others are Shared; each running turn travels with its chat (jobs are their jobs). A child
// that died meanwhile yields a zero Handover (the next image does without it).
func (s *Supervisor) pauseShared(ctx context.Context, h *hosts.Host, idle []*session, running []runningTurn, ended map[*job]bool) (HandedChild, []*job, error) {
	p, ok := h.Child().(pausable)
	rp, ok2 := h.Child().(runningPausable)
	if !ok || !ok2 && len(running) > 0 {
		return HandedChild{}, nil, fmt.Errorf("shared codex pid %d: %w", h.PID(), appserver.ErrNoHandover)
	}
	ss := append([]*session(nil), idle...)
	for _, r := range running {
		ss = append(ss, r.sess)
	}
	if n := s.hosts.Threads(h); n != len(ss) {
		// A thread of the child is not a chat's that can cross (a spare's, one leaving):
		// awaitQuiet waits those out, so this is a bug rather than a state to hand over.
		return HandedChild{}, nil, fmt.Errorf("shared codex pid %d holds %d threads, %d of them chats' that can cross", h.PID(), n, len(ss))
	}
	var ho appserver.Handover
	var err error
	if len(running) > 0 {
		ho, err = rp.PauseRunning(ctx)
	} else {
		ho, err = p.Pause(ctx)
	}
	if err != nil {
		if h.Child().Err() != nil {
			return HandedChild{}, nil, nil
		}
		return HandedChild{}, nil, fmt.Errorf("shared codex pid %d: %w", h.PID(), err)
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
		return &HandedTurn{MessageID: r.job.messageID, AskApprovalsOf: r.job.askApprovalsOf,
			Approvals: s.approvals.seqsOf(sess.key.key), DeadlineLeft: r.live.watch.leftNow()}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	first := ss[0]
	hc := HandedChild{ChatKey: first.key.key, ThreadID: first.threadID, Started: first.started, Turns: first.turns,
		Handover: ho, Turn: turnOf(first)}
	for _, o := range ss[1:] {
		hc.Shared = append(hc.Shared, SharedThread{ChatKey: o.key.key, ThreadID: o.threadID, Started: o.started,
			Turns: o.turns, Turn: turnOf(o)})
	}
	return hc, jobs, nil
}

// adoptShared registers a shared child the previous image handed over, with each of its chats'
// threads as an idle session. A pool of one thread per child closes it instead: its chats'
// next messages resume their threads in children of their own.
func (s *Supervisor) adoptShared(a AdoptedChild) {
	threads := append([]SharedThread{{ChatKey: a.ChatKey, ThreadID: a.ThreadID, Started: a.Started, Turns: a.Turns, Turn: a.Turn}}, a.Shared...)
	pid := a.Child.PID()
	if s.hosts == nil {
		s.log.Warn("a shared codex child was handed over to a pool of one child per chat; closing it (its chats resume their threads in children of their own)",
			zap.Int("pid", pid), zap.Int("threads", len(threads)))
		_ = a.Child.Close()
		return
	}
	ids := make([]string, len(threads))
	for i, th := range threads {
		ids[i] = th.ThreadID
	}
	views := s.hosts.Adopt(a.Child, ids)
	ident := childproc.ReadIdentity(pid)
	for i, th := range threads {
		v := views[i]
		s.mu.Lock()
		if !s.pool.takeSlotLocked() {
			s.mu.Unlock()
			s.log.Warn("no slot for a handed-over chat's thread; letting it go", zap.String("chat_key", th.ChatKey), zap.Int("pid", pid))
			_ = v.Close()
			continue
		}
		k := s.chats.keyLocked(th.ChatKey)
		sess := s.pool.newSessionLocked(k, s.log.With(zap.String("chat_key", th.ChatKey), zap.Int("pid", pid),
			zap.String("thread_id", th.ThreadID)))
		k.sess = sess
		sess.child, sess.host, sess.pid, sess.proc = v, v.Host(), pid, ident
		s.adoptedLocked(k, sess, th.ThreadID, th.Turns, th.Started, th.Turn)
	}
	s.log.Info("shared codex child adopted from the previous image; its chats stay warm", zap.Int("pid", pid), zap.Int("threads", len(threads)))
}
