package moleculetest

// Peer workspaces as the platform's A2A proxy serves them (workspace-server handlers/
// a2a_proxy.go, a2a_proxy_helpers.go, a2a_queue.go):
//   - a poll peer: 200 {"status":"queued","delivery_mode":"poll","method":"message/send"} at
//     once; the message becomes one activity row of the peer's, upserted on (workspace_id,
//     message_id), so a send again with the same messageId is the same message;
//   - a push peer: the send is held until the peer's whole turn is over, then 200 with the
//     peer's own JSON-RPC answer; the dispatch is detached from the caller (a caller that gives
//     up does not stop the turn), and every dispatch is a turn of its own;
//   - a busy peer: 202 {"queued":true,"queue_id","queue_depth","message"}, the queue
//     deduplicating on params.message.messageId;
//   - 503 with Retry-After, 402, 403, 413: see FailNextWith and FailNext.

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// PeerMode is how a peer workspace takes a message/send.
type PeerMode int

const (
	// PeerPoll answers {"status":"queued","delivery_mode":"poll"} at once.
	PeerPoll PeerMode = iota
	// PeerPush answers with the peer's own JSON-RPC reply once its turn is over.
	PeerPush
)

// Peer configures one peer workspace of the fake (SetPeer). A peer not configured answers as
// a push peer whose turn ends at once.
type Peer struct {
	Mode PeerMode
	// Turn, for a push peer, holds each turn until it receives a value (or the channel is
	// closed): the test decides when the peer's turn is over. Nil: turns end at once. Close
	// waits for turns in progress: a test ends them (closes Turn) before the platform closes.
	Turn <-chan struct{}
	// Answer is the text of a push peer's JSON-RPC answer; default "ok".
	Answer string
	// Echo, when set, makes the peer write back to this workspace about every message it
	// takes: a PeerMessage row Echo+text joins the activity feed, as a peer agent that answers
	// everything would (two such agents answer each other forever).
	Echo string
}

// PeerDelivery is a message a peer took.
type PeerDelivery struct {
	Peer      string
	MessageID string
	Text      string
	Metadata  map[string]any
	// How: "poll", "push" (a turn), or "queued" (202, dispatched later).
	How string
	// At is when the peer took it (a push peer: when its turn started).
	At time.Time
}

// peerState is the Platform's peers; guarded by Platform.mu.
type peerState struct {
	config     map[string]Peer
	delivered  []PeerDelivery
	busyQueue  int // sends still to answer 202
	nextQueued int
}

// SetPeer configures peer workspace id.
func (p *Platform) SetPeer(id string, peer Peer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.peers.config == nil {
		p.peers.config = make(map[string]Peer)
	}
	p.peers.config[id] = peer
}

// BusyQueueNext makes the next n accepted A2A sends answer 202 queued: the peer is mid-turn
// and the platform queued the message for it.
func (p *Platform) BusyQueueNext(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.peers.busyQueue += n
}

// FailNextWith is FailNext whose answers also carry header (e.g. Retry-After on a 503).
func (p *Platform) FailNextWith(route Route, n, status int, header http.Header) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fail[route] = append(p.fail[route], failure{n: n, status: status, header: header.Clone()})
}

// PeerDeliveries returns the messages peer took, in order: one per messageId for a poll peer
// and for the busy queue (as the platform deduplicates them), one per dispatch for a push peer.
func (p *Platform) PeerDeliveries(peer string) []PeerDelivery {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []PeerDelivery
	for _, d := range p.peers.delivered {
		if d.Peer == peer {
			out = append(out, d)
		}
	}
	return out
}

// PushTurns counts the turns push peer ran (one per dispatch, finished or not).
func (p *Platform) PushTurns(peer string) int {
	n := 0
	for _, d := range p.PeerDeliveries(peer) {
		if d.How == "push" {
			n++
		}
	}
	return n
}

// deliverToPeer serves an accepted message/send as the peer's mode says.
func (p *Platform) deliverToPeer(m a2aBody, s A2ASend) (int, any) {
	p.mu.Lock()
	peer, configured := p.peers.config[s.Peer]
	d := PeerDelivery{Peer: s.Peer, MessageID: s.MessageID, Text: s.Text, Metadata: s.Metadata, At: time.Now()}
	if p.peers.busyQueue > 0 {
		p.peers.busyQueue--
		p.peers.nextQueued++
		d.How = "queued"
		p.takeLocked(d, true)
		q := p.peers.nextQueued
		p.mu.Unlock()
		return http.StatusAccepted, map[string]any{"queued": true, "queue_id": "q-" + strconv.Itoa(q), "queue_depth": 1,
			"message": "workspace agent busy — request queued, will dispatch when capacity available"}
	}
	if configured && peer.Mode == PeerPoll {
		d.How = "poll"
		p.takeLocked(d, true)
		p.echoLocked(peer, s)
		p.mu.Unlock()
		return http.StatusOK, map[string]any{"status": "queued", "delivery_mode": "poll", "method": "message/send"}
	}
	d.How = "push"
	p.takeLocked(d, false)
	p.mu.Unlock()
	// The turn runs detached from the caller, as the platform's dispatch does. Only Turn ends
	// it (not Close): a goroutine waiting on a channel made outside a synctest bubble would keep
	// the bubble's clock from moving.
	if peer.Turn != nil {
		<-peer.Turn
	}
	p.mu.Lock()
	p.echoLocked(peer, s)
	p.changedLocked()
	p.mu.Unlock()
	answer := peer.Answer
	if answer == "" {
		answer = "ok"
	}
	return http.StatusOK, map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": map[string]any{"kind": "message", "role": "agent",
		"messageId": "ans-" + s.MessageID, "parts": []any{map[string]string{"kind": "text", "text": answer}}}}
}

// takeLocked records a delivery; dedupe drops one whose messageId the peer has already.
func (p *Platform) takeLocked(d PeerDelivery, dedupe bool) {
	if dedupe && slices.ContainsFunc(p.peers.delivered, func(o PeerDelivery) bool {
		return o.Peer == d.Peer && o.MessageID == d.MessageID && o.How != "push"
	}) {
		return
	}
	p.peers.delivered = append(p.peers.delivered, d)
}

// echoLocked writes the peer's answer to s into the feed when the peer echoes.
func (p *Platform) echoLocked(peer Peer, s A2ASend) {
	if peer.Echo == "" {
		return
	}
	p.logRowLocked(PeerMessage(s.Peer, peer.Echo+s.Text))
}

// DelegationResult is a delegate_result row as the platform writes it into the caller's feed
// (workspace-server handlers/delegation.go pushDelegationResultToInbox): source_id the caller
// (ws, this workspace), target_id the callee, the result in response_body.text.
func DelegationResult(ws, callee, delegationID, text string) Row {
	return delegationRow(ws, callee, delegationID, "ok", "Delegation result delivered", text, "")
}

// DelegationFailed is the delegate_result row of a delegation that failed: status error,
// error_detail set, no text.
func DelegationFailed(ws, callee, delegationID, detail string) Row {
	return delegationRow(ws, callee, delegationID, "error", "Delegation failed", "", detail)
}

func delegationRow(ws, callee, delegationID, status, summary, text, detail string) Row {
	r := Row{
		"activity_type": "a2a_receive",
		"method":        "delegate_result",
		"source_id":     ws,
		"target_id":     callee,
		"summary":       summary,
		"request_body":  map[string]any{"delegation_id": delegationID},
		"response_body": map[string]any{"text": text, "delegation_id": delegationID},
		"status":        status,
		"error_detail":  nil,
	}
	if detail != "" {
		r["error_detail"] = detail
	}
	if callee == "" {
		r["target_id"] = nil
	}
	return r
}

// String names a delivery for test failures.
func (d PeerDelivery) String() string {
	return fmt.Sprintf("%s %s %s %q", d.Peer, d.How, d.MessageID, d.Text)
}
