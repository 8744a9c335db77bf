package molecule

// Two agents must not answer each other forever. Every peer message gets a codex turn and an
// A2A reply; a peer agent that answers every message it gets (another daemon like this one, or
// an agent that replies with a tool) would take that reply as a new message and answer it, and
// so on without end. Nothing on the wire says that a message is an automatic answer: neither the
// platform nor Molecule's runtime marks one (their message/send carries no reply field; see
// docs/molecule.md), and a peer's own agent decides when it writes. So the daemon counts.

import (
	"sync"
	"time"

	"go.uber.org/zap"
)

// Defaults of Config.PeerExchanges and Config.PeerQuietReset.
const (
	// DefaultPeerExchanges: ten answers in a row to one peer is a long conversation between
	// agents; a loop costs at most that many turns before it stops.
	DefaultPeerExchanges = 10
	// DefaultPeerQuietReset: an agent loop answers within its turns (seconds to minutes); a
	// peer that writes again after ten quiet minutes starts a new conversation.
	DefaultPeerQuietReset = 10 * time.Minute
)

// maxTrackedPeers is the table size past which peers quiet for PeerQuietReset are dropped. Peer
// ids are workspaces the platform authenticated (source_id), so the table is bounded by the
// org's size anyway; the prune keeps a long-lived daemon's small.
const maxTrackedPeers = 4096

// peerExchanges counts, per peer agent, the messages answered in a row that may be answers to
// ours: a message counts only when the daemon read it after it began sending the peer a reply
// (a backlog the peer wrote before hearing from us is no loop, however long: a cold start that
// finds 25 messages of one peer answers all 25). Counting goes on within quiet of the last
// exchange; a message from this workspace's canvas user (a human) starts every count over, and
// so does a quiet spell. Past the cap the peer's messages are not answered. The count lives in
// memory: a restart starts it over.
type peerExchanges struct {
	cap   int
	quiet time.Duration

	mu    sync.Mutex
	peers map[string]*exchange
}

type exchange struct {
	n       int       // messages admitted in a row
	last    time.Time // the last message admitted or reply delivered
	sending int       // replies to the peer being delivered now
	replied time.Time // when the latest reply to the peer began to be sent
	capped  bool      // the cap was reported for this run of messages
}

func newPeerExchanges(capN int, quiet time.Duration) *peerExchanges {
	return &peerExchanges{cap: capN, quiet: quiet, peers: make(map[string]*exchange)}
}

// admit counts a message from peer, read at received, about to be answered. It returns the
// count and whether the message may be answered; first says this is the first message refused
// in this run of them.
func (p *peerExchanges) admit(peer string, received, now time.Time) (n int, ok, first bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	x := p.peers[peer]
	if x == nil {
		p.pruneLocked(now)
		x = &exchange{}
		p.peers[peer] = x
	}
	if x.sending == 0 && now.Sub(x.last) > p.quiet {
		x.n, x.capped = 0, false
	}
	x.last = now
	if x.replied.IsZero() || received.Before(x.replied) {
		// Read before the peer could have seen a reply of ours: not an answer to one.
		return x.n, true, false
	}
	if x.n >= p.cap {
		first = !x.capped
		x.capped = true
		return x.n, false, first
	}
	x.n++
	return x.n, true, false
}

// sending marks a reply to peer in delivery from now on; the returned func marks it done.
func (p *peerExchanges) sending(peer string, now time.Time) (done func(time.Time)) {
	p.mu.Lock()
	x := p.peers[peer]
	if x == nil {
		p.pruneLocked(now)
		x = &exchange{}
		p.peers[peer] = x
	}
	x.sending++
	x.replied = now
	p.mu.Unlock()
	return func(now time.Time) {
		p.mu.Lock()
		defer p.mu.Unlock()
		x.sending--
		x.last = now
	}
}

// humanSpoke starts every count over: a person wrote to this workspace.
func (p *peerExchanges) humanSpoke() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, x := range p.peers {
		if x.sending == 0 {
			delete(p.peers, id)
			continue
		}
		x.n, x.capped = 0, false
	}
}

// pruneLocked drops peers quiet for longer than quiet when the table is full; if all are busy
// the table grows past the bound rather than forget a count in progress.
func (p *peerExchanges) pruneLocked(now time.Time) {
	if len(p.peers) < maxTrackedPeers {
		return
	}
	for id, x := range p.peers {
		if x.sending == 0 && now.Sub(x.last) > p.quiet {
			delete(p.peers, id)
		}
	}
}

// admitPeer says whether msg, a peer agent's message, is answered. A message past the cap is
// finished unanswered: logged (a warning the first time in a run), counted, and acknowledged.
func (a *answerer) admitPeer(log *zap.Logger, msg message) bool {
	if msg.Kind != kindPeerAgent {
		return true
	}
	now := time.Now()
	received := msg.ReceivedAt
	if received.IsZero() {
		received = now
	}
	n, ok, first := a.peers.admit(msg.PeerID, received, now)
	if ok {
		return true
	}
	a.c.peerCapped.Add(1)
	if first {
		log.Warn("not answering this peer: automatic exchanges in a row reached the cap; it is answered again after a message from this workspace's canvas, or after a quiet spell",
			zap.String("peer", msg.PeerID), zap.Int("exchanges", n), zap.Int("cap", a.cfg.PeerExchanges),
			zap.Duration("quiet_reset", a.cfg.PeerQuietReset))
	} else {
		log.Info("peer message not answered: automatic exchanges with this peer are capped", zap.String("peer", msg.PeerID))
	}
	a.images.release(msg.ImageBytes())
	a.ledger.MarkDone(msg.ActivityID)
	a.state.persist(log)
	a.wakeAck()
	return false
}
