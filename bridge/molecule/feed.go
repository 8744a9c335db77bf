package molecule

// The feed: the platform's activity rows into jobs. It polls (woken by the event stream,
// stream.go), classifies each row (normalize.go), admits it in the ledger and queues it on the
// dispatcher, and tells the platform's mailbox how far the cursor got.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/chat"
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
	stream  *streamStats
	ackWake chan struct{} // cap 1: the cursor moved, maybe ack
	// pollWake (cap 1) asks for a poll now (an event, the stream's catch-up): at most one poll
	// runs and one waits. streamMoved (cap 1) says the stream went up or down, which changes the
	// poll's interval.
	pollWake    chan pollCause
	streamMoved chan struct{}
	// poisonSeen names the poison rows without an id already reported; the poll loop owns it.
	poisonSeen *idring.Ring
	// delegations re-polls after a delegation's event until its row is read (delegationpoll.go).
	delegations *delegationWatch
}

func newFeed(sh shared, ncfg normalizeConfig, stream *streamStats) *feed {
	f := &feed{deps: sh.deps, ncfg: ncfg, images: sh.images, peers: sh.peers, pause: sh.pause, outages: sh.outages,
		tenancy: sh.tenancy, stream: stream,
		ackWake: make(chan struct{}, 1), pollWake: make(chan pollCause, 1), streamMoved: make(chan struct{}, 1),
		poisonSeen: idring.New(sh.cfg.RecentIDs)}
	f.delegations = newDelegationWatch(f.wakePoll)
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
		unacked, _ := f.ledger.Counts()
		if unacked >= f.cfg.MaxUnacked {
			f.log.Warn("too many messages not yet acknowledged; polling paused until the oldest is finished",
				zap.Int("unacked", unacked), zap.String("oldest_activity_id", f.ledger.Head()))
			if f.ledger.WaitRoom(ctx, f.cfg.MaxUnacked) != nil {
				return
			}
			unacked, _ = f.ledger.Counts()
		}
		withCursor := cursor != ""
		// This poll reads whatever was announced until now.
		select {
		case <-f.pollWake:
		default:
		}
		f.c.polls[cause].Add(1)
		pollStart := time.Now()
		page, err := f.client.Poll(ctx, cursor, f.cfg.SinceSecs, platform.PageLimits{Rows: f.cfg.MaxUnacked - unacked, Bytes: f.cfg.MaxPollBytes})
		if ctx.Err() != nil {
			return
		}
		if f.cfg.OnPoll != nil {
			f.cfg.OnPoll(time.Since(pollStart), err)
		}
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
			f.c.pollErrors.Add(1)
			wait := bo.NextBackOff()
			switch {
			case platform.IsTenantOrgRequired(err):
				f.tenancy.refused(platform.CallPoll, err, zap.Duration("retry_in", wait))
			case platform.IsRateLimited(err):
				// Logged by rateLimited; the gate holds the next call back until it ends.
			default:
				f.outages.failed(platform.CallPoll, err, zap.String("cursor", cursor), zap.Duration("retry_in", wait))
			}
			cause = causeRetry
			timer.Reset(wait)
			continue
		}
		f.tenancy.clear()
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

// ingest classifies a page of rows (oldest first) and queues the new messages. It returns the id
// of the last row that has one: the next poll's since_id.
func (f *feed) ingest(rows []platform.Row, disp *dispatcher) (last string) {
	for i, row := range rows {
		n := f.normalize(row)
		f.delegations.rowRead(n.msg)
		id, seq := n.msg.ActivityID, n.msg.Seq
		if id != "" {
			last = id
		}
		log := f.log.With(zap.String("activity_id", id))
		switch n.disp {
		case dispEcho:
			if f.ledger.AdmitDone(id, seq) {
				f.c.skippedEchoes.Add(1)
				log.Debug("skipping our own row", zap.String("reason", n.reason))
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
				zap.String("reason", n.reason), zap.Int("row_index", i), zap.Int64("row_bytes", row.Size),
				zap.String("row_excerpt", chat.CapText(string(row.Raw), 200)))
		case dispMessage:
			log = log.With(zap.String("chat_key", n.msg.ChatKey))
			switch f.ledger.Admit(id, seq) {
			case ledger.AdmitNew:
				f.c.received.Add(1)
				if n.msg.OmittedBytes > 0 {
					f.c.truncated.Add(1)
					log.Warn("message text capped", zap.Int("omitted_bytes", n.msg.OmittedBytes), zap.Int("max_text_bytes", f.cfg.MaxTextBytes))
				}
				log.Info("message received", zap.String("kind", string(n.msg.Kind)), zap.String("peer_name", n.msg.PeerName))
				if n.msg.Kind == kindCanvasUser {
					f.peers.humanSpoke()
				}
				msg, dropped := f.images.admitImages(n.msg)
				msg.ReceivedAt = time.Now()
				if dropped {
					log.Warn("images not shown: too many image bytes wait for an answer",
						zap.Int64("image_bytes", n.msg.imageBytes()), zap.Int("max_pending_image_bytes", f.cfg.MaxPendingImageBytes))
				}
				j := job{msg: msg}
				if cmd, ok := chat.ParseCommand(n.msg.Text); ok && f.cfg.Controls != nil {
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
		return normalized{disp: dispPoison, msg: message{ActivityID: row.ID},
			reason: fmt.Sprintf("row is %d bytes, over the %d-byte row cap (MaxRowBytes); skipped without reading it", row.Size, f.cfg.MaxRowBytes)}
	}
	n := normalize(row.Raw, f.ncfg)
	if n.disp == dispPoison && n.msg.ActivityID == "" {
		n.msg.ActivityID = row.ID
	}
	return n
}

func (f *feed) wakeAck() {
	select {
	case f.ackWake <- struct{}{}:
	default:
	}
}

// ackLoop tells the platform's mailbox how far the cursor got, when rows carry a seq. A 404 means
// the platform has no mailbox: acking stops. Other failures are retried at the next wake-up.
func (f *feed) ackLoop(ctx context.Context) {
	var sent int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.ackWake:
		}
		seq := f.ledger.AckedSeq()
		if seq <= sent {
			continue
		}
		err := f.client.Ack(ctx, seq)
		var he *platform.HTTPError
		switch {
		case errors.As(err, &he) && he.Status == http.StatusNotFound:
			f.log.Info("platform has no activity mailbox (ack returned 404); not acking")
			return
		case err != nil:
			if ctx.Err() == nil {
				f.log.Debug("ack failed; trying again when the cursor moves", zap.Error(err))
			}
		default:
			sent = seq
		}
	}
}
