package molecule

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/bridge/molecule/ledger"
	"github.com/molecule-ai/codex-warm/bridge/molecule/platform"
)

// platformIdleConns is how many idle connections to the platform the inbox's own HTTP client
// keeps. Every call goes to PLATFORM_URL's origin, and Go's default of 2 idle connections per
// host would close and redial (a TLS handshake each) the connections of replies delivered at
// once, one per chat answered at the same time; 100 is http.DefaultTransport's MaxIdleConns, the
// idle connections it keeps for all hosts together. Connections in use are not capped
// (MaxConnsPerHost 0): calls at once are bounded by the chats with work, at most MaxUnacked.
const platformIdleConns = 100

// ErrUnauthorized is wrapped by Run's error when the platform rejects the workspace token at
// register (HTTP 401/403). Retrying cannot help; the operator has to fix the token.
var ErrUnauthorized = errors.New("platform rejected the workspace token")

// Inbox is the Molecule platform inbox: it registers the workspace, heartbeats, polls the
// activity feed, answers each message through the Answerer, delivers the reply and only then moves
// the durable inbox position. Create it with New and start it with Run.
//
// It is five parts along a message's way, each with its own state, lock and goroutines, and
// what they share (the ledger, the counters, the image budget, the pause gate, the peer caps),
// each of those with its own lock: the feed (feed.go: the event stream's wake-ups, the poll loop,
// the rows into jobs, the acks), the answerer (moleculeanswer.go: a message's turn, its wait and
// its reply stored, returned to handle to deliver), the replies (replies.go: a reply until the
// platform takes it, notices, files and uploads), the turn's view (turnview.go: progress notes,
// tool chips, approval prompts while a turn runs) and the workspace (register.go: register,
// heartbeat, the workspace's state, the canvas session). No part holds its lock while it calls
// another part, so the locks never nest. Inbox itself only builds them, runs them and routes a
// job from one to the next (handle), and handle alone delivers a reply.
type Inbox struct {
	cfg     Config
	log     *zap.Logger
	client  *platform.Client
	ownHTTP *http.Client // the client New created, closed by Run; nil when injected
	ledger  *ledger.Ledger
	state   *stateWriter
	c       *counters
	images  *imageBudget // image bytes of messages waiting for their answer
	stream  *streamStats
	refusal *refusal // the platform refusing the workspace (refusal.go)
	started atomic.Bool

	feed      *feed
	answerer  *answerer
	replies   *replies
	workspace *workspace
	// handed are the goroutines waiting for the replies of messages handed off (HandOff), each
	// delivering its reply.
	handed sync.WaitGroup
}

// deps are what every part uses, each safe for use at once: the configuration (read only), the
// logger, the platform client, the redactor, the ledger and its writer, the counters.
type deps struct {
	cfg    *Config
	log    *zap.Logger
	client *platform.Client
	red    redactor // what leaves: replies, notes, the heartbeat, the log
	ledger *ledger.Ledger
	state  *stateWriter
	c      *counters
}

// shared is what New hands the parts to build themselves from: deps, and what two parts or more
// use, each with its own lock (or atomic).
type shared struct {
	deps
	images  *imageBudget   // image bytes of messages waiting for their answer
	peers   *peerExchanges // the cap on automatic exchanges with one peer (pingpong.go)
	pause   *pauseGate     // holds polling and new turns while the workspace is paused
	window  *answerWindow  // answers and failures since the last heartbeat (health.go)
	outages *outages       // the platform unreachable, logged once each way (reach.go)
	tenancy *tenancyLog    // the tenant guard's refusal, logged once (tenancy.go)
	refusal *refusal       // the platform answering 404 for the workspace (refusal.go)
}

// New checks cfg, opens (or creates) the state directory and loads the inbox position.
// It does no network I/O.
func New(cfg Config) (*Inbox, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("molecule inbox: %w", err)
	}
	cfg = cfg.withDefaults()
	hc := cfg.HTTPClient
	var ownHTTP *http.Client
	if hc == nil {
		tr, _ := http.DefaultTransport.(*http.Transport)
		if tr != nil {
			tr = tr.Clone()
			tr.MaxConnsPerHost = 0
			tr.MaxIdleConns = max(tr.MaxIdleConns, platformIdleConns)
			tr.MaxIdleConnsPerHost = platformIdleConns
		}
		hc = &http.Client{Transport: tr}
		ownHTTP = hc
	}
	// The redactor of every log line: the secret set also knows the tokens a rotation brings later.
	red := redactor{set: cfg.Secrets}
	log := red.Logger(cfg.Logger).Named("bridge").With(zap.String("workspace_id", cfg.WorkspaceID))
	c := &counters{}
	opts := clientOptions(cfg)
	opts.OnLimited = rateLimited(log, c, cfg.OrgID != "")
	client, err := platform.New(opts, hc)
	if err != nil {
		return nil, fmt.Errorf("molecule inbox: %w", err)
	}
	client.SetLogger(log)
	l, err := ledger.Open(ledger.Config{Dir: cfg.StateDir, WorkspaceID: cfg.WorkspaceID, RecentIDs: cfg.RecentIDs, Log: log})
	if err != nil {
		return nil, fmt.Errorf("molecule inbox: %w", err)
	}
	session, err := openCanvasSession(cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("molecule inbox: %w", err)
	}
	m := &Inbox{cfg: cfg, log: log, client: client, ownHTTP: ownHTTP, ledger: l, c: c,
		state:  newStateWriter(l, c),
		images: &imageBudget{max: int64(cfg.MaxPendingImageBytes)},
		stream: newStreamStats()}
	sh := shared{deps: deps{cfg: &m.cfg, log: log, client: client, red: red, ledger: l, state: m.state, c: c},
		images: m.images, pause: &pauseGate{}, peers: newPeerExchanges(cfg.PeerExchanges, cfg.PeerQuietReset),
		window: &answerWindow{}, outages: newOutages(log), tenancy: newTenancyLog(log),
		refusal: newRefusal(log, cfg.WorkspaceID, cfg.OrgID)}
	m.refusal = sh.refusal
	ncfg := normalizeConfig{WorkspaceID: cfg.WorkspaceID, MaxTextBytes: cfg.MaxTextBytes,
		MaxImageBytes: cfg.MaxImageBytes, MaxImagesBytes: cfg.MaxImagesBytes}
	m.feed = newFeed(sh, ncfg, m.stream)
	m.replies = newReplies(sh, ncfg, m.feed.wakeAck)
	m.answerer = newAnswerer(sh, m.replies, newTurnView(sh.deps, m.replies), m.feed.wakeAck)
	m.workspace = newWorkspace(sh, session, m.answerer.busy)
	return m, nil
}

// Run registers the workspace, then polls and answers until ctx is done. On ctx done it stops
// polling, lets running turns and their deliveries finish for up to DrainTimeout (turns not
// started yet, and replies not delivered by then, are picked up again by the next run), writes
// the state file and returns nil. It returns an error wrapping ErrUnauthorized when the platform
// rejects the token at register, and other errors only for what retrying cannot fix. Run returns
// only after every goroutine it started has exited. It may be called once.
func (m *Inbox) Run(ctx context.Context) error {
	if !m.started.CompareAndSwap(false, true) {
		return errors.New("molecule inbox: Run called twice")
	}
	if m.ownHTTP != nil {
		defer m.ownHTTP.CloseIdleConnections()
	}
	ctx, stopRun := context.WithCancelCause(ctx)
	defer stopRun(nil)
	m.workspace.begin(stopRun)
	m.replies.sweepOutbox(m.log)

	if err := m.workspace.register(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}

	// Turns and deliveries run on drainCtx: it outlives ctx by DrainTimeout so that work in
	// progress can finish instead of being thrown away and redone after the restart.
	drainCtx, cancelDrain := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelDrain()
	var disp *dispatcher
	disp = newDispatcher(func(j job) { m.handle(ctx, drainCtx, disp, j) })
	for _, p := range m.ledger.TakeRestored() {
		m.c.recovered.Add(1)
		m.log.Info("reply pending from an earlier run; delivering it without running codex again",
			zap.String("chat_key", p.ChatKey), zap.String("activity_id", p.ActivityID))
		disp.enqueue(job{pending: &p})
	}

	m.workspace.checkState(ctx, false) // a paused workspace answers nothing, from the first poll on
	var wg sync.WaitGroup
	wg.Go(func() { platform.RunEvery(ctx, m.cfg.HeartbeatInterval, m.workspace.beat) })
	wg.Go(func() { m.feed.ackLoop(ctx) })
	if m.cfg.EventStream {
		m.feed.startStream(ctx, &wg)
	}
	m.feed.pollLoop(ctx, disp)

	m.log.Info("stopping: polling stopped, letting running turns finish", zap.Duration("drain_timeout", m.cfg.DrainTimeout))
	drainTimer := time.AfterFunc(m.cfg.DrainTimeout, cancelDrain)
	disp.wait()
	m.handed.Wait()
	drainTimer.Stop()
	cancelDrain()
	wg.Wait()
	m.state.sync(m.log, "stopping")
	m.log.Info("stopped", zap.String("cursor", m.ledger.Cursor()))
	if err := context.Cause(ctx); errors.Is(err, ErrWorkspaceDeleted) {
		return err
	}
	return nil
}

// handle answers and delivers one job. It runs on the job's chat key worker. The answerer
// returns what to deliver and handle delivers it, on every path: a reply leaves from here alone.
func (m *Inbox) handle(ctx, drainCtx context.Context, disp *dispatcher, j job) {
	if ctx.Err() != nil {
		// Shutting down: work not started stays behind the cursor and comes again after restart.
		return
	}
	log := m.log.With(zap.String("chat_key", j.chatKey()), zap.String("activity_id", j.activityID()))
	var out toSend
	ok := true
	switch {
	case j.reset:
		m.answerer.queuedReset(drainCtx, log, j.chatKey())
		return
	case j.cmd != nil:
		out = m.answerer.command(drainCtx, log, disp, j)
	case j.pending != nil:
		out = toSend{reply: *j.pending}
	default:
		var later func() (toSend, bool)
		done := disp.answering(j.chatKey())
		out, ok, later = m.message(ctx, drainCtx, log, j.msg)
		done()
		if later != nil {
			// Handed over: its reply is waited for beside the chat's next messages.
			m.handed.Go(func() {
				if out, ok := later(); ok {
					m.replies.deliver(drainCtx, log, out)
				}
			})
			return
		}
	}
	if ok {
		m.replies.deliver(drainCtx, log, out)
	}
}

// message answers a new message: it checks a peer's against the cap of automatic exchanges,
// follows the canvas chat's session, takes the files it names, and runs its turn (handed over
// under a busy policy: later is then set, see answerer.handOff). ok is false when there is
// nothing to deliver.
func (m *Inbox) message(ctx, drainCtx context.Context, log *zap.Logger, msg message) (out toSend, ok bool, later func() (toSend, bool)) {
	switch msg.Kind {
	case kindPeerAgent:
		if !m.answerer.admitPeer(log, msg) {
			return toSend{}, false, nil
		}
	case kindCanvasUser:
		m.workspace.followCanvasSession(drainCtx, log, msg)
	}
	if len(msg.Uploads) > 0 {
		var nothing bool
		if msg, nothing, ok = m.replies.takeUploads(ctx, log, msg); !ok {
			m.images.release(msg.ImageBytes()) // stopping: the row comes again after the restart
			return toSend{}, false, nil
		}
		if nothing {
			return m.answerer.answerNotices(log, msg), true, nil
		}
	}
	if m.cfg.HandOff != nil {
		return m.answerer.handOff(ctx, drainCtx, log, msg) // releases the images once the reply is settled
	}
	out, ok = m.answerer.answer(ctx, drainCtx, log, msg)
	m.images.release(msg.ImageBytes()) // the reply is stored: the images are done with
	return out, ok, nil
}
