package molecule

// Replies: what the inbox sends a chat as its answer. A reply until the platform takes it (here,
// and outbound.go: notify, A2A, which failures are sent again, the reply's files on their way
// out), the files a turn sends (sendfiles.go) and the canvas uploads a message names
// (uploads.go). What a running turn shows the chat is the turn's view (turnview.go); the one
// wait a reply's delivery meets is waiting.go's.

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

// replies owns the send_file boxes and the upload limits; mu guards boxes, and the limits have
// their own lock (uploadState).
type replies struct {
	deps
	ncfg    normalizeConfig
	images  *imageBudget
	peers   *peerExchanges
	window  *answerWindow
	tenancy *tenancyLog
	waits   *waits // a delivery's wait while the platform cannot take the reply
	wakeAck func() // the cursor may have moved: the feed acks
	uploads uploadState

	mu    sync.Mutex
	boxes map[string]*attempts // activity id → the send_file boxes of its attempts (sendfiles.go)
}

func newReplies(sh shared, ncfg normalizeConfig, wakeAck func()) *replies {
	r := &replies{deps: sh.deps, ncfg: ncfg, images: sh.images, peers: sh.peers, window: sh.window, tenancy: sh.tenancy,
		wakeAck: wakeAck, boxes: make(map[string]*attempts)}
	r.waits = newWaits(sh.deps, r)
	return r
}

// deliver delivers what the answerer returned: its reply, then its notes, each logged with its
// own chat and activity.
func (d *replies) deliver(ctx context.Context, log *zap.Logger, s toSend) {
	d.deliverReply(ctx, log, s.reply)
	for _, p := range s.notes {
		d.deliverReply(ctx, d.log.With(zap.String("chat_key", p.ChatKey), zap.String("activity_id", p.ActivityID)), p)
	}
}

// deliverReply sends a reply until the platform accepts it, refuses it for good, or ctx ends
// (then it stays pending in the state file for the next run). Retries never run codex again.
func (d *replies) deliverReply(ctx context.Context, log *zap.Logger, p ledger.Reply) {
	log = log.With(zap.String("route", p.Route.Kind), zap.String("target_workspace", p.Route.Workspace))
	if p.Route.Kind == routeA2A {
		done := d.peers.sending(p.Route.Workspace, time.Now())
		defer func() { done(time.Now()) }()
	}
	attempts, unknown := 0, 0
	var err error
	werr := d.waits.await(ctx, ctx, log, p, func() condition {
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
func (d *replies) send(ctx context.Context, log *zap.Logger, p *ledger.Reply) error {
	if !validWorkspaceID(p.Route.Workspace) {
		return backoff.Permanent(fmt.Errorf("reply for activity %s has an invalid target workspace %q", p.ActivityID, p.Route.Workspace))
	}
	return d.sendAs(ctx, log, p, platform.ReplyID(d.cfg.WorkspaceID, p.ActivityID))
}

// sendAs makes one delivery attempt of p with key as its Idempotency-Key.
func (d *replies) sendAs(ctx context.Context, log *zap.Logger, p *ledger.Reply, key string) error {
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
