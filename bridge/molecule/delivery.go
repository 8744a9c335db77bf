package molecule

// Delivery: everything the inbox sends the chat. A reply until the platform takes it (here,
// outbound.go), the one wait of a message that cannot go on now and its notices (await, tell),
// the files a turn sends (sendfiles.go) and the canvas uploads it is given (uploads.go), and what
// a running turn shows: progress notes, tool chips and approval prompts (progress.go, chips.go,
// approvals.go).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/molecule-ai/codex-warm/bridge/molecule/ledger"
	"github.com/molecule-ai/codex-warm/bridge/molecule/platform"
	"go.uber.org/zap"
)

// delivery owns the send_file boxes, the tool chips' pacing and the upload limits; mu guards
// boxes and chipLast.
type delivery struct {
	deps
	ncfg    normalizeConfig
	images  *imageBudget
	peers   *peerExchanges
	window  *answerWindow
	tenancy *tenancyLog
	wakeAck func() // the cursor may have moved: the feed acks
	uploads uploadState

	mu       sync.Mutex
	boxes    map[string]*sendBox  // activity id → the files its turn sent (sendfiles.go)
	chipLast map[string]time.Time // chat key → its last tool chip (chips.go)
}

func newDelivery(sh shared, ncfg normalizeConfig, wakeAck func()) *delivery {
	return &delivery{deps: sh.deps, ncfg: ncfg, images: sh.images, peers: sh.peers, window: sh.window, tenancy: sh.tenancy,
		wakeAck: wakeAck, boxes: make(map[string]*sendBox), chipLast: make(map[string]time.Time)}
}

// deliver sends a reply until the platform accepts it, refuses it for good, or drainCtx ends
// (then it stays pending in the state file for the next run). Retries never run codex again.
func (d *delivery) deliver(ctx context.Context, log *zap.Logger, p ledger.Reply) {
	log = log.With(zap.String("route", p.Route.Kind), zap.String("target_workspace", p.Route.Workspace))
	if p.Route.Kind == routeA2A {
		done := d.peers.sending(p.Route.Workspace, time.Now())
		defer func() { done(time.Now()) }()
	}
	attempts, unknown := 0, 0
	var err error
	werr := d.await(ctx, ctx, log, p, func() condition {
		attempts++
		var c condition
		c, err = deliveryCondition(d.send(ctx, log, &p), &unknown)
		return c
	}, func(c condition, retryIn time.Duration, _ bool) {
		d.c.deliveryRetries.Add(1)
		if c.reason == reasonOrgIDMissing {
			d.tenancy.refused("reply", err, zap.String("chat_key", p.ChatKey), zap.String("activity_id", p.ActivityID))
		}
		log.Warn("reply delivery failed; retrying without running codex again", zap.String("waits_for", string(c.reason)),
			zap.Error(err), zap.Int("attempt", attempts), zap.Duration("retry_in", retryIn))
	})
	switch {
	case werr != nil:
		log.Warn("stopping before the reply was delivered; it stays pending and is delivered by the next run", zap.Int("attempts", attempts))
		return
	case err == nil:
		d.c.delivered.Add(1)
		d.c.filesSent.Add(int64(len(p.Files)))
		log.Info("reply delivered", zap.Int("attempts", attempts))
	case errors.Is(err, errFateUnknown):
		d.c.deliveryUnknown.Add(1)
		log.Warn("reply sent twice, both answers lost; not sending it again (the platform may hold it once or twice)",
			zap.Error(err), zap.Int("attempts", attempts))
	default:
		// Retrying a refusal like 403 talk_to_user_disabled or 404 would block this chat forever;
		// the reply is logged and counted as undeliverable and the message counts as finished.
		d.c.deliveryFailed.Add(1)
		d.window.note(true, err.Error())
		log.Error("platform refused the reply for good; giving up on it", zap.String("reason", refusalReason(p.Route.Kind, err)),
			zap.Error(err), zap.Int("attempts", attempts))
	}
	d.ledger.MarkDone(p.ActivityID)
	d.state.persist(log)
	d.removeOutbox(p.ActivityID)
	d.wakeAck()
}

// send makes one delivery attempt. Every attempt of one reply, in any run, carries the same
// Idempotency-Key (the reply id of its activity). A reply stored by an older version keeps the
// random messageId it was stored with: a peer may have seen it already.
func (d *delivery) send(ctx context.Context, log *zap.Logger, p *ledger.Reply) error {
	if !validWorkspaceID(p.Route.Workspace) {
		return backoff.Permanent(fmt.Errorf("reply for activity %s has an invalid target workspace %q", p.ActivityID, p.Route.Workspace))
	}
	return d.sendAs(ctx, log, p, platform.ReplyID(d.cfg.WorkspaceID, p.ActivityID))
}

// sendAs makes one delivery attempt of p with key as its Idempotency-Key.
func (d *delivery) sendAs(ctx context.Context, log *zap.Logger, p *ledger.Reply, key string) error {
	switch p.Route.Kind {
	case routeNotify:
		// The files are uploaded (once: their URIs are stored) before the notify names them.
		if err := d.uploadFiles(ctx, log, p); err != nil {
			return err
		}
		return d.client.Notify(ctx, p.Route.Workspace, key, p.Text, attachments(p.Files)...)
	case routeA2A:
		messageID := p.MessageID
		if messageID == "" {
			messageID = key
		}
		parts := d.peerFileParts(log, p)
		ans, err := d.client.A2ASend(ctx, p.Route.Workspace, messageID, key, p.InReplyTo, p.Text, parts...)
		if err != nil {
			return d.peerSendFailed(log, p, len(parts) > 0, err)
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

// await runs try through the wait of the message to names until a result stands. It returns
// nil then, or ctx's error when ctx ended a wait. A notice goes to to's chat on tellCtx, once
// per reason, after the ledger holds that it was sent. retrying hears of every try put off;
// newReason says it is the first for its reason in a row.
func (d *delivery) await(ctx, tellCtx context.Context, log *zap.Logger, to ledger.Reply, try func() condition,
	retrying func(c condition, retryIn time.Duration, newReason bool)) error {
	w := newWait(d.cfg.RetryInitial, d.cfg.RetryMax, d.ledger.WaitOf(to.ActivityID).Told)
	return w.run(ctx, try, func(c condition, newReason, tell bool) {
		retrying(c, time.Until(w.until), newReason)
		if !newReason && !tell {
			return
		}
		d.ledger.SetWait(ledger.Wait{ActivityID: to.ActivityID, Reason: c.reason, Until: c.until, Told: w.told})
		d.state.sync(log, "recording a waiting message")
		if tell && c.notice != "" {
			d.tell(tellCtx, log, to, c)
		}
	})
}

// tell sends c's notice to to's chat, once: it is tried once, like a progress note, since the
// answer itself follows. Its message id is the reply id of "<activity id>/<reason>".
func (d *delivery) tell(ctx context.Context, log *zap.Logger, to ledger.Reply, c condition) {
	p := ledger.Reply{ActivityID: to.ActivityID, ChatKey: to.ChatKey, Route: to.Route, Text: d.red.String(c.notice),
		MessageID: platform.ReplyID(d.cfg.WorkspaceID, to.ActivityID+"/"+string(c.reason))}
	if err := d.sendAs(ctx, log, &p, p.MessageID); err != nil && ctx.Err() == nil {
		log.Info("notice of a waiting message not delivered", zap.String("reason", string(c.reason)), zap.Error(err))
	}
}
