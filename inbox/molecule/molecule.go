package molecule

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/inbox/chat"
	"github.com/molecule-ai/codex-warm/inbox/molecule/platform"
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
type Inbox struct {
	cfg     Config
	log     *zap.Logger
	client  *platform.Client
	red     redactor     // what leaves: replies, notes, the heartbeat, the log
	ownHTTP *http.Client // the client New created, closed by Run; nil when injected
	ledger  *ledger
	ncfg    normalizeConfig
	ackWake chan struct{} // cap 1: the cursor moved, maybe ack
	// pollWake (cap 1) asks for a poll now (an event, the stream's catch-up): at most one poll
	// runs and one waits. streamMoved (cap 1) says the stream went up or down, which changes the
	// poll's interval.
	pollWake    chan pollCause
	streamMoved chan struct{}
	streamStats *streamStats
	// reach turns the outcomes of polls and heartbeats into one log line per outage and one
	// when it ends.
	reach platform.Reachability
	// writes turns failed state writes into one log line when they start and one when they end.
	writes stateWrites
	// poisonSeen names the poison rows without an id already reported; the poll loop owns it.
	poisonSeen *idRing
	images     *imageBudget // image bytes of messages waiting for their answer
	uploads    uploadState
	session    *canvasSession // the canvas chat's New-session reference (session.go)
	peers      *peerExchanges
	c          counters
	started    atomic.Bool
	// orgMissingLogged: the tenant guard's refusal was logged (tenantRefused); a poll that goes
	// through clears it.
	orgMissingLogged atomic.Bool
	// handed are the goroutines waiting for the replies of messages handed off (HandOff).
	handed sync.WaitGroup
	line   handedLine // the order of handed-over messages that wait

	mu        sync.Mutex
	inflight  map[string]string    // activity id → chat key, for running Submits
	boxes     map[string]*sendBox  // activity id → the files its turn sent (sendfiles.go)
	chipLast  map[string]time.Time // chat key → its last tool chip (chips.go)
	runStart  time.Time
	winTotal  int    // answers since the last heartbeat
	winFailed int    // failures since the last heartbeat
	lastError string // a failure since the last heartbeat, for sample_error
	// lastRuntime is the runtime_state of the last heartbeat (health.go).
	lastRuntime string
	// refusedBeats counts heartbeats in a row whose state check found the token refused while
	// the heartbeat passed; issued is a token the platform issued at register (wsstate.go).
	refusedBeats int
	issued       string

	pause   pauseGate               // holds polling and new turns while the workspace is paused
	stopRun context.CancelCauseFunc // ends Run early: the workspace was deleted
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
	m := &Inbox{}
	opts := clientOptions(cfg)
	opts.OnLimited = func(op string, wait time.Duration, status int) { m.rateLimited(op, wait, status) }
	client, err := platform.New(opts, hc)
	if err != nil {
		return nil, fmt.Errorf("molecule inbox: %w", err)
	}
	// The redactor of every log line: the secret set also knows the tokens a rotation brings later.
	red := redactor{set: cfg.Secrets}
	log := red.Logger(cfg.Logger).Named("bridge").With(zap.String("workspace_id", cfg.WorkspaceID))
	client.SetLogger(log)
	*m = Inbox{
		client:  client,
		red:     red,
		ownHTTP: ownHTTP,
		cfg:     cfg,
		log:     log,
		ncfg: normalizeConfig{workspaceID: cfg.WorkspaceID, maxTextBytes: cfg.MaxTextBytes,
			maxImageBytes: cfg.MaxImageBytes, maxImagesBytes: cfg.MaxImagesBytes},
		ackWake:     make(chan struct{}, 1),
		pollWake:    make(chan pollCause, 1),
		streamMoved: make(chan struct{}, 1),
		streamStats: newStreamStats(),
		inflight:    make(map[string]string),
		boxes:       make(map[string]*sendBox),
		chipLast:    make(map[string]time.Time),
		poisonSeen:  newIDRing(cfg.RecentIDs),
		images:      &imageBudget{max: int64(cfg.MaxPendingImageBytes)},
		peers:       newPeerExchanges(cfg.PeerExchanges, cfg.PeerQuietReset),
	}
	l, err := openLedger(cfg.StateDir, cfg.WorkspaceID, cfg.RecentIDs, log)
	if err != nil {
		return nil, fmt.Errorf("molecule inbox: %w", err)
	}
	m.ledger = l
	if m.session, err = openCanvasSession(cfg.StateDir); err != nil {
		return nil, fmt.Errorf("molecule inbox: %w", err)
	}
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
	m.mu.Lock()
	m.runStart = time.Now()
	m.mu.Unlock()
	ctx, m.stopRun = context.WithCancelCause(ctx)
	defer m.stopRun(nil)

	if err := m.register(ctx); err != nil {
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
	for _, p := range m.ledger.takeRestored() {
		m.c.recovered.Add(1)
		m.log.Info("reply pending from an earlier run; delivering it without running codex again",
			zap.String("chat_key", p.ChatKey), zap.String("activity_id", p.ActivityID))
		disp.enqueue(job{pending: &p})
	}

	m.checkState(ctx, false) // a paused workspace answers nothing, from the first poll on
	var wg sync.WaitGroup
	wg.Go(func() { platform.RunEvery(ctx, m.cfg.HeartbeatInterval, m.beat) })
	wg.Go(func() { m.ackLoop(ctx) })
	if m.cfg.EventStream {
		st := &streamer{c: m.client, log: m.log.Named("stream"), self: m.cfg.WorkspaceID, stats: m.streamStats,
			live: livenessBeats * m.cfg.HeartbeatInterval, timeout: m.cfg.RequestTimeout,
			wake: m.wakePoll, changed: m.streamChanged}
		m.streamStats.state.Store(StreamConnecting)
		wg.Go(func() { st.run(ctx) })
	}
	m.pollLoop(ctx, disp)

	m.log.Info("stopping: polling stopped, letting running turns finish", zap.Duration("drain_timeout", m.cfg.DrainTimeout))
	drainTimer := time.AfterFunc(m.cfg.DrainTimeout, cancelDrain)
	disp.wait()
	m.handed.Wait()
	drainTimer.Stop()
	cancelDrain()
	wg.Wait()
	m.syncState(m.log, "stopping")
	m.log.Info("stopped", zap.String("cursor", m.ledger.Cursor()))
	if err := context.Cause(ctx); errors.Is(err, ErrWorkspaceDeleted) {
		return err
	}
	return nil
}

// register comes online before the first poll. A rejected token (401/403) and other client
// errors are fatal; network errors and 5xx are retried until ctx is done (the platform may be
// starting).
func (m *Inbox) register(ctx context.Context) error {
	var answer platform.RegisterAnswer
	err := platform.RetryForever(ctx, m.cfg.RetryInitial, m.cfg.RetryMax, func() error {
		var err error
		answer, err = m.client.Register(ctx, m.cfg.AgentName)
		if answer.AuthToken != "" {
			m.mu.Lock()
			m.issued = answer.AuthToken
			m.mu.Unlock()
		}
		if he := (*platform.HTTPError)(nil); errors.As(err, &he) && !platform.RetryableStatus(he.Status) {
			return backoff.Permanent(err)
		}
		return err
	}, func(err error, wait time.Duration) {
		m.log.Warn("register failed; retrying", zap.Error(err), zap.Duration("retry_in", wait))
	})
	if err == nil {
		m.log.Info("registered with the platform", zap.String("platform", m.client.Origin()), zap.String("delivery_mode", answer.DeliveryMode))
		m.registered(answer)
		return nil
	}
	var he *platform.HTTPError
	if errors.As(err, &he) && he.Unauthorized() {
		return fmt.Errorf("%w: workspace %s, HTTP %d at register: check MOLECULE_WORKSPACE_TOKEN (or <CONFIGS_DIR>/.auth_token) and MOLECULE_ORG_ID",
			ErrUnauthorized, m.cfg.WorkspaceID, he.Status)
	}
	if errors.As(err, &he) && he.Redirect() {
		return fmt.Errorf("register workspace %s: %w: set PLATFORM_URL to the address that answers", m.cfg.WorkspaceID, err)
	}
	return fmt.Errorf("register workspace %s: %w", m.cfg.WorkspaceID, err)
}

// pollLoop polls until ctx is done: every PollInterval (every SafetyPollInterval while the event
// stream is up), at once when an event may mean a new row and after each connect of the stream,
// at once while a page is read in pieces, with backoff after errors, and not while the unacked
// window is full. A poll keeps at most the room left in that window and MaxPollBytes of row
// text. An event never cuts short a wait the daemon keeps (a backoff, a full window, the rate
// gate, a pause): it only ends the idle wait between polls, and at most one poll runs and one
// waits.
//
// A 410 (cursor unknown) falls back to the recent window after a wait that grows with every 410
// in a row and starts over once the platform accepts a cursor again: a platform that has lost
// every cursor would otherwise be asked for the whole window twice per PollInterval.
func (m *Inbox) pollLoop(ctx context.Context, disp *dispatcher) {
	cursor := m.ledger.Cursor()
	bo := platform.NewBackoff(m.cfg.RetryInitial, m.cfg.RetryMax)
	goneBo := platform.NewBackoff(m.cfg.RetryInitial, m.cfg.RetryMax)
	timer := time.NewTimer(0)
	defer timer.Stop()
	// The first poll catches up on what landed while the daemon was not running.
	cause := causeCatchUp
	// idle says the timer is the wait between polls, which an event ends; lastPoll is when the
	// last poll ended.
	idle := false
	var lastPoll time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
			if idle {
				cause = m.idleCause()
			}
		case c := <-m.pollWake:
			if !idle {
				// A wait the daemon keeps: the poll at its end reads what the event announced.
				continue
			}
			timer.Stop()
			cause = c
		case <-m.streamMoved:
			if idle {
				timer.Reset(max(time.Until(lastPoll.Add(m.idleInterval())), 0))
			}
			continue
		}
		idle = false
		if m.pause.wait(ctx) != nil {
			return
		}
		unacked, _ := m.ledger.counts()
		if unacked >= m.cfg.MaxUnacked {
			m.log.Warn("too many messages not yet acknowledged; polling paused until the oldest is finished",
				zap.Int("unacked", unacked), zap.String("oldest_activity_id", m.ledger.head()))
			if m.ledger.waitRoom(ctx, m.cfg.MaxUnacked) != nil {
				return
			}
			unacked, _ = m.ledger.counts()
		}
		withCursor := cursor != ""
		// This poll reads whatever was announced until now.
		select {
		case <-m.pollWake:
		default:
		}
		m.c.polls[cause].Add(1)
		pollStart := time.Now()
		page, err := m.client.Poll(ctx, cursor, m.cfg.SinceSecs, platform.PageLimits{Rows: m.cfg.MaxUnacked - unacked, Bytes: m.cfg.MaxPollBytes})
		if ctx.Err() != nil {
			return
		}
		if m.cfg.OnPoll != nil {
			m.cfg.OnPoll(time.Since(pollStart), err)
		}
		// With a cursor, rows read before a failure are complete and follow it: keep them.
		last := m.ingest(page.Rows, disp)
		if last != "" {
			cursor = last
		}
		switch {
		case errors.Is(err, platform.ErrCursorGone):
			wait := goneBo.NextBackOff()
			m.log.Warn("platform no longer knows the cursor (HTTP 410); falling back to the recent window",
				zap.String("cursor", cursor), zap.Int("since_secs", m.cfg.SinceSecs), zap.Duration("retry_in", wait))
			cursor = ""
			cause = causeRetry
			timer.Reset(wait)
			continue
		case err != nil:
			m.c.pollErrors.Add(1)
			wait := bo.NextBackOff()
			switch {
			case platform.IsTenantOrgRequired(err):
				m.tenantRefused(platform.CallPoll, err, zap.Duration("retry_in", wait))
			case platform.IsRateLimited(err):
				// Logged by rateLimited; the gate holds the next call back until it ends.
			default:
				m.platformCallFailed(platform.CallPoll, err, zap.String("cursor", cursor), zap.Duration("retry_in", wait))
			}
			cause = causeRetry
			timer.Reset(wait)
			continue
		}
		m.orgMissingLogged.Store(false)
		m.log.Debug("polled", zap.Int("rows", len(page.Rows)), zap.Bool("more", page.More),
			zap.String("cursor", cursor), zap.Duration("took", time.Since(pollStart)))
		m.platformCallOK(platform.CallPoll)
		bo.Reset()
		if withCursor {
			goneBo.Reset()
		}
		// Reading on at once needs a row to read on from: a page whose kept rows have no id
		// would only be fetched again.
		if page.More && last != "" {
			m.log.Debug("activity page larger than one poll keeps; reading on from the last row kept",
				zap.Int("rows", len(page.Rows)), zap.String("cursor", cursor))
			cause = causeMore
			timer.Reset(0)
			continue
		}
		idle, lastPoll = true, time.Now()
		timer.Reset(m.idleInterval())
	}
}

// ingest classifies a page of rows (oldest first) and queues the new messages. It returns the id
// of the last row that has one: the next poll's since_id.
func (m *Inbox) ingest(rows []platform.Row, disp *dispatcher) (last string) {
	for i, row := range rows {
		n := m.normalize(row)
		id, seq := n.msg.ActivityID, n.msg.Seq
		if id != "" {
			last = id
		}
		log := m.log.With(zap.String("activity_id", id))
		switch n.disp {
		case dispEcho:
			if m.ledger.admitDone(id, seq) {
				m.c.skippedEchoes.Add(1)
				log.Debug("skipping our own row", zap.String("reason", n.reason))
			} else {
				m.c.duplicates.Add(1)
			}
		case dispPoison:
			if !m.firstPoisonSighting(id, seq, row) {
				m.c.duplicates.Add(1)
				continue
			}
			m.c.poison.Add(1)
			log.Warn("poison row: cannot be answered, moving past it",
				zap.String("reason", n.reason), zap.Int("row_index", i), zap.Int64("row_bytes", row.Size),
				zap.String("row_excerpt", chat.CapText(string(row.Raw), 200)))
		case dispMessage:
			log = log.With(zap.String("chat_key", n.msg.ChatKey))
			switch m.ledger.admit(id, seq) {
			case admitNew:
				m.c.received.Add(1)
				if n.msg.OmittedBytes > 0 {
					m.c.truncated.Add(1)
					log.Warn("message text capped", zap.Int("omitted_bytes", n.msg.OmittedBytes), zap.Int("max_text_bytes", m.cfg.MaxTextBytes))
				}
				log.Info("message received", zap.String("kind", string(n.msg.Kind)), zap.String("peer_name", n.msg.PeerName))
				if n.msg.Kind == kindCanvasUser {
					m.peers.humanSpoke()
				}
				msg, dropped := m.images.admitImages(n.msg)
				msg.ReceivedAt = time.Now()
				if dropped {
					log.Warn("images not shown: too many image bytes wait for an answer",
						zap.Int64("image_bytes", n.msg.imageBytes()), zap.Int("max_pending_image_bytes", m.cfg.MaxPendingImageBytes))
				}
				j := job{msg: msg}
				if cmd, ok := chat.ParseCommand(n.msg.Text); ok && m.cfg.Controls != nil {
					j.cmd = &cmd
				}
				if j.cmd != nil && j.cmd.Name == chat.CmdNew {
					disp.enqueueNew(j)
				} else {
					disp.enqueue(j)
				}
			case admitRecovered:
				m.c.duplicates.Add(1)
				log.Info("row came again; its reply from an earlier run is being delivered")
			default:
				m.c.duplicates.Add(1)
				log.Debug("duplicate row skipped")
			}
		}
	}
	// Also after an empty page: a state write that failed earlier is retried every poll.
	m.persist(m.log)
	m.wakeAck()
	return last
}

// firstPoisonSighting records a poison row and reports whether it is new, so it is warned about
// and counted once. A row with an id is finished in the ledger. A row without one cannot be
// moved past with since_id until a row with an id follows it, so every poll fetches it again:
// its content names it instead.
func (m *Inbox) firstPoisonSighting(id string, seq int64, row platform.Row) bool {
	if id != "" {
		return m.ledger.admitDone(id, seq)
	}
	fp := row.Fingerprint()
	if m.poisonSeen.has(fp) {
		return false
	}
	m.poisonSeen.add(fp)
	return true
}

// normalize judges a row read from the page. A row over the row cap was not kept: it is poison,
// known by the id read on the way past it. A row that is not valid JSON gets that id too.
func (m *Inbox) normalize(row platform.Row) normalized {
	if row.Oversized() {
		return normalized{disp: dispPoison, msg: message{ActivityID: row.ID},
			reason: fmt.Sprintf("row is %d bytes, over the %d-byte row cap (MaxRowBytes); skipped without reading it", row.Size, m.cfg.MaxRowBytes)}
	}
	n := normalize(row.Raw, m.ncfg)
	if n.disp == dispPoison && n.msg.ActivityID == "" {
		n.msg.ActivityID = row.ID
	}
	return n
}

// handle answers and delivers one job. It runs on the job's chat key worker.
func (m *Inbox) handle(ctx, drainCtx context.Context, disp *dispatcher, j job) {
	if ctx.Err() != nil {
		// Shutting down: work not started stays behind the cursor and comes again after restart.
		return
	}
	log := m.log.With(zap.String("chat_key", j.chatKey()), zap.String("activity_id", j.activityID()))
	if j.reset {
		m.queuedReset(drainCtx, log, j.chatKey())
		return
	}
	if j.cmd != nil {
		m.command(drainCtx, log, disp, j)
		return
	}
	if j.pending == nil && !m.admitPeer(log, j.msg) {
		return
	}
	if j.pending == nil && j.msg.Kind == kindCanvasUser {
		m.followCanvasSession(drainCtx, log, j.msg)
	}
	msg := j.msg
	if j.pending == nil && len(msg.uploads) > 0 {
		var nothing, ok bool
		if msg, nothing, ok = m.takeUploads(ctx, log, msg); !ok {
			m.images.release(msg.imageBytes()) // stopping: the row comes again after the restart
			return
		}
		if nothing {
			m.answerNotices(drainCtx, log, msg)
			return
		}
	}
	if j.pending == nil && m.cfg.HandOff != nil {
		m.handOff(ctx, drainCtx, log, msg) // releases the images once the reply is settled
		return
	}
	p := j.pending
	if p == nil {
		var ok bool
		p, ok = m.answer(ctx, drainCtx, log, msg)
		m.images.release(msg.imageBytes()) // the reply is stored: the images are done with
		if !ok {
			return
		}
	}
	m.deliver(drainCtx, log, *p)
}

// deliver sends a reply until the platform accepts it, refuses it for good, or drainCtx ends
// (then it stays pending in the state file for the next run). Retries never run codex again.
func (m *Inbox) deliver(ctx context.Context, log *zap.Logger, p pendingReply) {
	log = log.With(zap.String("route", p.Route.Kind), zap.String("target_workspace", p.Route.Workspace))
	if p.Route.Kind == routeA2A {
		done := m.peers.sending(p.Route.Workspace, time.Now())
		defer func() { done(time.Now()) }()
	}
	attempts, unknown := 0, 0
	var err error
	werr := m.await(ctx, ctx, log, p, func() condition {
		attempts++
		var c condition
		c, err = deliveryCondition(m.send(ctx, log, &p), &unknown)
		return c
	}, func(c condition, retryIn time.Duration, _ bool) {
		m.c.deliveryRetries.Add(1)
		if c.reason == reasonOrgIDMissing {
			m.tenantRefused("reply", err, zap.String("chat_key", p.ChatKey), zap.String("activity_id", p.ActivityID))
		}
		log.Warn("reply delivery failed; retrying without running codex again", zap.String("waits_for", string(c.reason)),
			zap.Error(err), zap.Int("attempt", attempts), zap.Duration("retry_in", retryIn))
	})
	switch {
	case werr != nil:
		log.Warn("stopping before the reply was delivered; it stays pending and is delivered by the next run", zap.Int("attempts", attempts))
		return
	case err == nil:
		m.c.delivered.Add(1)
		m.c.filesSent.Add(int64(len(p.Files)))
		log.Info("reply delivered", zap.Int("attempts", attempts))
	case errors.Is(err, errFateUnknown):
		m.c.deliveryUnknown.Add(1)
		log.Warn("reply sent twice, both answers lost; not sending it again (the platform may hold it once or twice)",
			zap.Error(err), zap.Int("attempts", attempts))
	default:
		// Retrying a refusal like 403 talk_to_user_disabled or 404 would block this chat forever;
		// the reply is logged and counted as undeliverable and the message counts as finished.
		m.c.deliveryFailed.Add(1)
		m.noteAnswer(true, err.Error())
		log.Error("platform refused the reply for good; giving up on it", zap.String("reason", refusalReason(p.Route.Kind, err)),
			zap.Error(err), zap.Int("attempts", attempts))
	}
	m.ledger.markDone(p.ActivityID)
	m.persist(log)
	m.removeOutbox(p.ActivityID)
	m.wakeAck()
}

// send makes one delivery attempt. Every attempt of one reply, in any run, carries the same
// Idempotency-Key (the reply id of its activity). A reply stored by an older version keeps the
// random messageId it was stored with: a peer may have seen it already.
func (m *Inbox) send(ctx context.Context, log *zap.Logger, p *pendingReply) error {
	if !validWorkspaceID(p.Route.Workspace) {
		return backoff.Permanent(fmt.Errorf("reply for activity %s has an invalid target workspace %q", p.ActivityID, p.Route.Workspace))
	}
	return m.sendAs(ctx, log, p, platform.ReplyID(m.cfg.WorkspaceID, p.ActivityID))
}

// sendAs makes one delivery attempt of p with key as its Idempotency-Key.
func (m *Inbox) sendAs(ctx context.Context, log *zap.Logger, p *pendingReply, key string) error {
	switch p.Route.Kind {
	case routeNotify:
		// The files are uploaded (once: their URIs are stored) before the notify names them.
		if err := m.uploadFiles(ctx, log, p); err != nil {
			return err
		}
		return m.client.Notify(ctx, p.Route.Workspace, key, p.Text, attachments(p.Files)...)
	case routeA2A:
		messageID := p.MessageID
		if messageID == "" {
			messageID = key
		}
		parts := m.peerFileParts(log, p)
		ans, err := m.client.A2ASend(ctx, p.Route.Workspace, messageID, key, p.InReplyTo, p.Text, parts...)
		if err != nil {
			return m.peerSendFailed(log, p, len(parts) > 0, err)
		}
		if ans.RPCErr != "" {
			log.Warn("the platform accepted the reply but the peer answered with an error; not retrying", zap.String("rpc_error", ans.RPCErr))
		}
		// A push peer's answer is its turn's reply to ours: not a new message (see a2aSend).
		log.Debug("peer took the reply", zap.String("how", ans.How), zap.String("queue_id", ans.QueueID))
		return nil
	default:
		return backoff.Permanent(fmt.Errorf("reply for activity %s has an unknown route %q", p.ActivityID, p.Route.Kind))
	}
}

// permanentDeliveryError says whether a delivery failure cannot go away by retrying: client
// errors (403 talk_to_user_disabled, 404 workspace not found, 400, 413, ...). 401 is retried: the
// reply is kept until an operator fixes the token (a restart delivers it from the state file).
// So is the tenant guard's 400 for a missing X-Molecule-Org-Id: the reply is fine, the daemon's
// MOLECULE_ORG_ID is missing.
// A redirect (3xx) is retried like a 5xx: the reply did not reach the platform, and a platform
// being moved is an outage, not a refusal.
func permanentDeliveryError(err error) bool {
	var pe *backoff.PermanentError
	if errors.As(err, &pe) {
		return true
	}
	var he *platform.HTTPError
	if !errors.As(err, &he) {
		return false
	}
	return he.Status != http.StatusUnauthorized && !he.TenantOrgRequired() && !platform.RetryableStatus(he.Status) && he.Status >= 400
}

// persist writes the state file if something changed (syncState: a failure is counted, and
// logged once until a write succeeds; the next write retries).
func (m *Inbox) persist(log *zap.Logger) { m.syncState(log, "recording the inbox position") }

func (m *Inbox) wakeAck() {
	select {
	case m.ackWake <- struct{}{}:
	default:
	}
}

// ackLoop tells the platform's mailbox how far the cursor got, when rows carry a seq. A 404 means
// the platform has no mailbox: acking stops. Other failures are retried at the next wake-up.
func (m *Inbox) ackLoop(ctx context.Context) {
	var sent int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.ackWake:
		}
		seq := m.ledger.AckedSeq()
		if seq <= sent {
			continue
		}
		err := m.client.Ack(ctx, seq)
		var he *platform.HTTPError
		switch {
		case errors.As(err, &he) && he.Status == http.StatusNotFound:
			m.log.Info("platform has no activity mailbox (ack returned 404); not acking")
			return
		case err != nil:
			if ctx.Err() == nil {
				m.log.Debug("ack failed; trying again when the cursor moves", zap.Error(err))
			}
		default:
			sent = seq
		}
	}
}
