package molecule

// The feed: the platform's activity rows into jobs. It polls (woken by the event stream,
// stream.go), classifies each row (package inbound), admits it in the ledger and queues it on the
// dispatcher, and tells the platform's mailbox how far the cursor got.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/molecule-ai/codex-warm/bridge/chat"
	"github.com/molecule-ai/codex-warm/bridge/molecule/inbound"
	"github.com/molecule-ai/codex-warm/bridge/molecule/ledger"
	"github.com/molecule-ai/codex-warm/bridge/molecule/platform"
	"github.com/molecule-ai/codex-warm/internal/idring"
	"go.uber.org/zap"
)

// feed owns the poll loop, the ack loop and the stream's subscription. Its channels are its own;
// others reach it through wakeAck.
type feed struct {
	deps
	ncfg    normalizeConfig
	images  *imageBudget
	peers   *peerExchanges
	pause   *pauseGate
	outages *outages
	tenancy *tenancyLog
	refusal *refusal
	stream  *streamStats
	ackWake chan struct{} // cap 1: the cursor moved, maybe ack
	// pollWake (cap 1) asks for a poll now (an event, the stream's catch-up): at most one poll
	// runs and one waits. streamMoved (cap 1) says the stream went up or down, which changes the
	// poll's interval.
	pollWake    chan pollCause
	streamMoved chan struct{}
	// poisonSeen names the poison rows without an id already reported; the poll loop owns it.
	poisonSeen *idring.Ring
	// announced is what the stream's events announced and the polls read (announce.go).
	announced *announcements
	// delegations re-polls after a delegation's event until its row is read (delegationpoll.go).
	delegations *delegationWatch
}

func newFeed(sh shared, ncfg normalizeConfig, stream *streamStats) *feed {
	f := &feed{deps: sh.deps, ncfg: ncfg, images: sh.images, peers: sh.peers, pause: sh.pause, outages: sh.outages,
		tenancy: sh.tenancy, refusal: sh.refusal, stream: stream,
		ackWake: make(chan struct{}, 1), pollWake: make(chan pollCause, 1), streamMoved: make(chan struct{}, 1),
		poisonSeen: idring.New(sh.cfg.RecentIDs), announced: newAnnouncements(sh.cfg.RecentIDs)}
	// A re-poll is asked for by no event the announcements saw: it always runs.
	f.delegations = newDelegationWatch(func(c pollCause) {
		f.announced.force()
		f.wakePoll(c)
	})
	return f
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
func (f *feed) pollLoop(ctx context.Context, disp *dispatcher) {
	cursor := f.ledger.Cursor()
	bo := platform.NewBackoff(f.cfg.RetryInitial, f.cfg.RetryMax)
	goneBo := platform.NewBackoff(f.cfg.RetryInitial, f.cfg.RetryMax)
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
				cause = f.idleCause()
			}
		case c := <-f.pollWake:
			if !idle {
				// A wait the daemon keeps: the poll at its end reads what the event announced.
				continue
			}
			if c == causeEvent && !f.announced.needed() {
				// The last poll read every message announced since it began.
				continue
			}
			timer.Stop()
			cause = c
		case <-f.streamMoved:
			if idle {
				timer.Reset(max(time.Until(lastPoll.Add(f.idleInterval())), 0))
			}
			continue
		}
		idle = false
		if f.pause.wait(ctx) != nil {
			return
		}
		unacked, ok := f.roomToPoll(ctx)
		if !ok {
			return
		}
		withCursor := cursor != ""
		// This poll reads whatever was announced until now.
		select {
		case <-f.pollWake:
		default:
		}
		f.announced.began()
		f.c.polls[cause].Add(1)
		pollStart := time.Now()
		page, err := f.client.Poll(ctx, cursor, f.cfg.SinceSecs, platform.PageLimits{Rows: f.cfg.MaxUnacked - unacked, Bytes: f.cfg.MaxPollBytes})
		if ctx.Err() != nil {
			return
		}
		if f.cfg.OnPoll != nil {
			f.cfg.OnPoll(time.Since(pollStart), err)
		}
		// Judged before the rows go on (ingest wakes the ack loop, which reads the refusal).
		err = f.judgePoll(err)
		// With a cursor, rows read before a failure are complete and follow it: keep them.
		last := f.ingest(page.Rows, disp)
		if last != "" {
			cursor = last
		}
		switch {
		case errors.Is(err, platform.ErrCursorGone):
			wait := goneBo.NextBackOff()
			f.log.Warn("platform no longer knows the cursor (HTTP 410); falling back to the recent window",
				zap.String("cursor", cursor), zap.Int("since_secs", f.cfg.SinceSecs), zap.Duration("retry_in", wait))
			cursor = ""
			cause = causeRetry
			timer.Reset(wait)
			continue
		case err != nil:
			cause = causeRetry
			timer.Reset(f.pollFailed(err, cursor, bo))
			continue
		}
		f.tenancy.clear()
		f.refusal.accepted()
		f.log.Debug("polled", zap.Int("rows", len(page.Rows)), zap.Bool("more", page.More),
			zap.String("cursor", cursor), zap.Duration("took", time.Since(pollStart)))
		f.outages.ok(platform.CallPoll)
		bo.Reset()
		if withCursor {
			goneBo.Reset()
		}
		// Reading on at once needs a row to read on from: a page whose kept rows have no id
		// would only be fetched again.
		if page.More && last != "" {
			f.log.Debug("activity page larger than one poll keeps; reading on from the last row kept",
				zap.Int("rows", len(page.Rows)), zap.String("cursor", cursor))
			cause = causeMore
			timer.Reset(0)
			continue
		}
		idle, lastPoll = true, time.Now()
		timer.Reset(f.idleInterval())
	}
}

// The steps below are pollLoop's own, apart so that the loop reads as its schedule (what wakes
// it, what it waits for next) and stays within the length one reader takes in.

// roomToPoll returns how many messages are not yet acknowledged, first waiting while the unacked
// window is full; ok is false when ctx ended the wait.
func (f *feed) roomToPoll(ctx context.Context) (unacked int, ok bool) {
	unacked, _ = f.ledger.Counts()
	if unacked >= f.cfg.MaxUnacked {
		f.log.Warn("too many messages not yet acknowledged; polling paused until the oldest is finished",
			zap.Int("unacked", unacked), zap.String("oldest_activity_id", f.ledger.Head()))
		if f.ledger.WaitRoom(ctx, f.cfg.MaxUnacked) != nil {
			return 0, false
		}
		unacked, _ = f.ledger.Counts()
	}
	return unacked, true
}

// pollFailed counts and logs a failed poll (other than a 410) by what failed it, and returns how
// long to wait before the retry.
func (f *feed) pollFailed(err error, cursor string, bo *backoff.ExponentialBackOff) time.Duration {
	f.c.pollErrors.Add(1)
	wait := bo.NextBackOff()
	switch {
	case errors.Is(err, ErrWorkspaceRefused):
		// Logged by judgePoll; the backoff keeps checking, so a fix resumes by itself.
	case platform.IsTenantOrgRequired(err):
		f.tenancy.refused(platform.CallPoll, err, zap.Duration("retry_in", wait))
	case platform.IsRateLimited(err):
		// Logged by rateLimited; the gate holds the next call back until it ends.
	default:
		f.outages.failed(platform.CallPoll, err, zap.String("cursor", cursor), zap.Duration("retry_in", wait))
	}
	return wait
}

// ingest classifies a page of rows (oldest first) and queues the new messages. It returns the id
// of the last row that has one: the next poll's since_id.
func (f *feed) ingest(rows []platform.Row, disp *dispatcher) (last string) {
	for i, row := range rows {
		n := f.normalize(row)
		f.delegations.rowRead(n.Msg)
		id, seq := n.Msg.ActivityID, n.Msg.Seq
		f.announced.readMessage(n.A2AID)
		if id != "" {
			last = id
		}
		log := f.log.With(zap.String("activity_id", id))
		switch n.Disp {
		case dispEcho:
			if f.ledger.AdmitDone(id, seq) {
				f.c.skippedEchoes.Add(1)
				log.Debug("skipping our own row", zap.String("reason", n.Reason))
			} else {
				f.c.duplicates.Add(1)
			}
		case dispPoison:
			if !f.firstPoisonSighting(id, seq, row) {
				f.c.duplicates.Add(1)
				continue
			}
			f.c.poison.Add(1)
			log.Warn("poison row: cannot be answered, moving past it",
				zap.String("reason", n.Reason), zap.Int("row_index", i), zap.Int64("row_bytes", row.Size),
				zap.String("row_excerpt", chat.CapText(string(row.Raw), 200)))
		case dispMessage:
			log = log.With(zap.String("chat_key", n.Msg.ChatKey))
			switch f.ledger.Admit(id, seq) {
			case ledger.AdmitNew:
				f.c.received.Add(1)
				if n.Msg.OmittedBytes > 0 {
					f.c.truncated.Add(1)
					log.Warn("message text capped", zap.Int("omitted_bytes", n.Msg.OmittedBytes), zap.Int("max_text_bytes", f.cfg.MaxTextBytes))
				}
				log.Info("message received", zap.String("kind", string(n.Msg.Kind)), zap.String("peer_name", n.Msg.PeerName))
				if n.Msg.Kind == kindCanvasUser {
					f.peers.humanSpoke()
				}
				msg, dropped := f.images.admitImages(n.Msg)
				msg.ReceivedAt = time.Now()
				if dropped {
					log.Warn("images not shown: too many image bytes wait for an answer",
						zap.Int64("image_bytes", n.Msg.ImageBytes()), zap.Int("max_pending_image_bytes", f.cfg.MaxPendingImageBytes))
				}
				j := job{msg: msg}
				if cmd, ok := chat.ParseCommand(n.Msg.Text); ok && f.cfg.Controls != nil {
					j.cmd = &cmd
				}
				if j.cmd != nil && j.cmd.Name == chat.CmdNew {
					disp.enqueueNew(j)
				} else {
					disp.enqueue(j)
				}
			case ledger.AdmitRecovered:
				f.c.duplicates.Add(1)
				log.Info("row came again; its reply from an earlier run is being delivered")
			default:
				f.c.duplicates.Add(1)
				log.Debug("duplicate row skipped")
			}
		}
	}
	// Also after an empty page: a state write that failed earlier is retried every poll.
	f.state.persist(f.log)
	f.wakeAck()
	return last
}

// firstPoisonSighting records a poison row and reports whether it is new, so it is warned about
// and counted once. A row with an id is finished in the ledger. A row without one cannot be
// moved past with since_id until a row with an id follows it, so every poll fetches it again:
// its content names it instead.
func (f *feed) firstPoisonSighting(id string, seq int64, row platform.Row) bool {
	if id != "" {
		return f.ledger.AdmitDone(id, seq)
	}
	fp := row.Fingerprint()
	if f.poisonSeen.Has(fp) {
		return false
	}
	f.poisonSeen.Add(fp)
	return true
}

// normalize judges a row read from the page. A row over the row cap was not kept: it is poison,
// known by the id read on the way past it. A row that is not valid JSON gets that id too.
func (f *feed) normalize(row platform.Row) normalized {
	if row.Oversized() {
		return normalized{Disp: dispPoison, Msg: message{ActivityID: row.ID},
			Reason: fmt.Sprintf("row is %d bytes, over the %d-byte row cap (MaxRowBytes); skipped without reading it", row.Size, f.cfg.MaxRowBytes)}
	}
	n := inbound.Normalize(row.Raw, f.ncfg)
	if n.Disp == dispPoison && n.Msg.ActivityID == "" {
		n.Msg.ActivityID = row.ID
	}
	return n
}

func (f *feed) wakeAck() {
	select {
	case f.ackWake <- struct{}{}:
	default:
	}
}

// judgePoll classifies a poll's error: a 404 (register passed, so the route exists) is the
// platform refusing the workspace, returned as an error wrapping ErrWorkspaceRefused. Any answer
// at all tells whoever waits for the first poll's outcome.
func (f *feed) judgePoll(err error) error {
	var he *platform.HTTPError
	switch {
	case err == nil:
		return nil
	case isNotFound(err):
		return f.refusal.refused(platform.CallPoll, err)
	case errors.As(err, &he), errors.Is(err, platform.ErrCursorGone):
		f.refusal.answered()
	}
	return err
}

// ackAbsentRetry is how long acks wait after a 404 while polls pass (a platform without the
// mailbox) before one is tried again: a few requests an hour, and an upgrade is found.
const ackAbsentRetry = 10 * time.Minute

// ackLoop tells the platform's mailbox how far the cursor got, when rows carry a seq. The ack is
// cumulative and only decides the platform's retention, so one goes out once the daemon has
// been idle (nothing unacknowledged) for PollInterval, or SafetyPollInterval after the last one
// while it stays busy: not one per message. The ledger's acked seq moves only once a reply is
// delivered, so nothing is acked before. A 404 while the platform refuses the workspace
// (refusal.go) holds acks until it accepts the workspace again; a 404 while polls pass (a
// platform without the mailbox) holds them for ackAbsentRetry. Other failures are retried at
// the next wake-up.
func (f *feed) ackLoop(ctx context.Context) {
	var sent int64
	var pace ackPace
	absentLogged := false
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.ackWake:
		case <-timer.C:
		}
		seq := f.ledger.AckedSeq()
		if seq <= sent {
			continue
		}
		unacked, _ := f.ledger.Counts()
		if wait := pace.wait(time.Now(), unacked == 0, f.cfg.PollInterval, f.cfg.SafetyPollInterval); wait > 0 {
			timer.Reset(wait)
			continue
		}
		timer.Stop()
		err := f.client.Ack(ctx, seq)
		switch {
		case isNotFound(err):
			if !f.holdAcks(ctx, err, &absentLogged) {
				return
			}
			f.wakeAck() // try again at once
		case err != nil:
			if ctx.Err() == nil {
				f.log.Debug("ack failed; trying again when the cursor moves", zap.Error(err))
			}
		default:
			sent = seq
			pace.sent(time.Now())
		}
	}
}

// ackPace decides when an ack due goes out; the ack loop owns it.
type ackPace struct {
	last      time.Time // the last ack sent
	pending   time.Time // since when an ack is due
	idleSince time.Time // since when nothing is unacknowledged (zero: busy)
}

// wait is how long an ack due now waits yet: until the daemon has been idle for idleFor, or
// until every after the last ack (after it became due, for the first), whichever comes first.
func (p *ackPace) wait(now time.Time, idle bool, idleFor, every time.Duration) time.Duration {
	if p.pending.IsZero() {
		p.pending = now
	}
	switch {
	case !idle:
		p.idleSince = time.Time{}
	case p.idleSince.IsZero():
		p.idleSince = now
	}
	from := p.last
	if from.IsZero() {
		from = p.pending
	}
	deadline := from.Add(every)
	if !p.idleSince.IsZero() {
		deadline = minTime(deadline, p.idleSince.Add(idleFor))
	}
	return max(deadline.Sub(now), 0)
}

// sent records an ack sent.
func (p *ackPace) sent(now time.Time) {
	p.last, p.pending, p.idleSince = now, time.Time{}, time.Time{}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// holdAcks waits after an ack's 404: until the platform accepts the workspace again when it
// refuses it, else ackAbsentRetry. It reports false when ctx ended.
func (f *feed) holdAcks(ctx context.Context, err error, absentLogged *bool) bool {
	if f.refusal.current() != nil {
		f.log.Debug("ack refused (HTTP 404) with the workspace; acking again once the platform accepts it", zap.Error(err))
		for {
			changed := f.refusal.changes()
			if f.refusal.current() == nil {
				return true
			}
			select {
			case <-ctx.Done():
				return false
			case <-changed:
			}
		}
	}
	if !*absentLogged {
		*absentLogged = true
		f.log.Info("ack answered 404 while polls pass: the platform has no activity mailbox; acking again later",
			zap.Duration("retry_in", ackAbsentRetry))
	}
	return platform.Sleep(ctx, ackAbsentRetry)
}
