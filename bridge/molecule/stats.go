package molecule

import (
	"sync/atomic"

	"github.com/molecule-ai/codex-warm/bridge/molecule/platform"
)

// Stats are the Molecule inbox's counters since New, and a few gauges.
type Stats struct {
	// Received counts rows accepted for answering (new, not duplicates, echoes or poison).
	Received int64 `json:"received"`
	// Answered counts Submit results turned into a reply (including failure replies).
	Answered int64 `json:"answered"`
	// CodexFailures counts answers that report a failure instead of codex's answer.
	CodexFailures int64 `json:"codex_failures"`
	// Delivered counts replies the platform accepted.
	Delivered int64 `json:"delivered"`
	// DeliveryRetries counts failed delivery attempts that were retried.
	DeliveryRetries int64 `json:"delivery_retries"`
	// DeliveryFailed counts replies given up on because the platform refused them for good
	// (403 talk_to_user_disabled, 404, other 4xx): poison replies.
	DeliveryFailed int64 `json:"delivery_failed"`
	// Recovered counts pending replies loaded from the state file at start.
	Recovered int64 `json:"recovered"`
	// Poison counts rows that cannot be answered (logged with their id and moved past).
	Poison int64 `json:"poison"`
	// SkippedEchoes counts our own replies (and our own rows) seen in the activity feed.
	SkippedEchoes int64 `json:"skipped_echoes"`
	// Duplicates counts rows seen again while in flight or after they were finished.
	Duplicates int64 `json:"duplicates"`
	// Truncated counts inbound messages cut to MaxTextBytes.
	Truncated int64 `json:"truncated"`
	// PollErrors, HeartbeatErrors and PersistErrors count failed polls, heartbeats and state
	// file writes.
	PollErrors      int64 `json:"poll_errors"`
	HeartbeatErrors int64 `json:"heartbeat_errors"`
	PersistErrors   int64 `json:"persist_errors"`
	// Refused is why the platform refuses the workspace (a 404 on its activity feed after a
	// successful register: a wrong MOLECULE_ORG_ID or WORKSPACE_ID, a deleted workspace); ""
	// while it accepts it. The daemon is not ready meanwhile.
	Refused string `json:"refused,omitempty"`
	// RateLimited counts platform answers 429 (rate limit): each held every call back for its
	// Retry-After.
	RateLimited int64 `json:"rate_limited"`
	// Abandoned counts turns cut off by shutdown, and messages that waited for another try while
	// the pool was busy when shutdown came; their rows are answered after the restart.
	Abandoned int64 `json:"abandoned"`
	// BusyRetries counts Submit results the pool answered busy whose message was tried again
	// later instead of being answered busy.
	BusyRetries int64 `json:"busy_retries"`
	// UnreachableRetries counts tries of a message put off because the model service could
	// not be reached.
	UnreachableRetries int64 `json:"unreachable_retries"`
	// Parked counts messages parked until the account's usage limit resets (each told once);
	// ParkedTooLong counts those answered with the limit because the reset was past ParkLimit.
	Parked        int64 `json:"parked"`
	ParkedTooLong int64 `json:"parked_too_long"`
	// Commands counts chat commands answered (/stop, /new, /status, /help).
	Commands int64 `json:"commands"`
	// PeerCapped counts peer messages left unanswered because the automatic exchanges with
	// that peer reached Config.PeerExchanges.
	PeerCapped int64 `json:"peer_capped"`
	// DeliveryUnknown counts replies given up on after two attempts whose answers were lost
	// (sent, fate unknown): sending a third copy could make a third bubble.
	DeliveryUnknown int64 `json:"delivery_unknown"`
	// FilesSent counts files the agent sent (send_file) that the platform took with a reply;
	// FilesRefused counts files it named that may not leave (sendfiles.go).
	FilesSent    int64 `json:"files_sent"`
	FilesRefused int64 `json:"files_refused"`

	// Cursor is the durable inbox position.
	Cursor string `json:"cursor"`
	// Unacked is the number of received rows not yet behind the cursor.
	Unacked int `json:"unacked"`
	// PendingReplies is the number of replies waiting for delivery.
	PendingReplies int `json:"pending_replies"`
	// InFlight is the number of Submit calls running.
	InFlight int `json:"in_flight"`

	// Polls counts activity polls by why they ran (interval, safety, event, catch_up, retry,
	// more).
	Polls map[string]int64 `json:"polls"`
	// Stream is the event stream's subscription (stream.go).
	Stream StreamStats `json:"stream"`
	// Budget is the platform's rate budget as last seen (ratelimit.go).
	Budget platform.Budget `json:"budget"`
	// Chips counts tool chips (agent_log rows of canvas turns, chips.go): sent, coalesced into
	// a later one, dropped (low budget, a burst beyond the queue) and failed.
	Chips ChipStats `json:"chips"`
}

// ChipStats count tool chips.
type ChipStats struct {
	Sent      int64 `json:"sent"`
	Coalesced int64 `json:"coalesced"`
	Dropped   int64 `json:"dropped"`
	Failed    int64 `json:"failed"`
}

// StreamStats is the event stream's state and counters.
type StreamStats struct {
	State StreamState `json:"state"`
	// Connects counts connects tried; Wakeups events that woke the poll.
	Connects int64 `json:"connects"`
	Wakeups  int64 `json:"wakeups"`
	// Events counts events seen, by type.
	Events map[string]int64 `json:"events,omitempty"`
}

// counters are the atomic fields behind Stats.
type counters struct {
	received, answered, codexFailures, delivered, deliveryRetries, deliveryFailed, recovered,
	poison, skippedEchoes, duplicates, truncated, pollErrors, heartbeatErrors, persistErrors,
	abandoned, busyRetries, unreachableRetries, commands, parked, parkedTooLong, rateLimited, peerCapped,
	deliveryUnknown, filesSent, filesRefused atomic.Int64
	chipsSent, chipsCoalesced, chipsDropped, chipsFailed atomic.Int64
	polls                                                [numCauses]atomic.Int64
}

// pollCounts are the polls by cause, by name.
func (c *counters) pollCounts() map[string]int64 {
	out := make(map[string]int64, numCauses)
	for i := range numCauses {
		out[i.String()] = c.polls[i].Load()
	}
	return out
}

// Refused is nil while the platform accepts the workspace, and an error wrapping
// ErrWorkspaceRefused, with the cause and the fix, while it answers 404 on the workspace's
// activity feed after a successful register. The readiness probe reports it.
func (m *Inbox) Refused() error { return m.refusal.current() }

// Stats returns the counters and gauges.
func (m *Inbox) Stats() Stats {
	unacked, pending := m.ledger.Counts()
	inflight, _ := m.answerer.busy()
	refused := ""
	if err := m.refusal.current(); err != nil {
		refused = err.Error()
	}
	return Stats{
		Refused:            refused,
		Received:           m.c.received.Load(),
		Answered:           m.c.answered.Load(),
		CodexFailures:      m.c.codexFailures.Load(),
		Delivered:          m.c.delivered.Load(),
		DeliveryRetries:    m.c.deliveryRetries.Load(),
		DeliveryFailed:     m.c.deliveryFailed.Load(),
		Recovered:          m.c.recovered.Load(),
		Poison:             m.c.poison.Load(),
		SkippedEchoes:      m.c.skippedEchoes.Load(),
		Duplicates:         m.c.duplicates.Load(),
		Truncated:          m.c.truncated.Load(),
		PollErrors:         m.c.pollErrors.Load(),
		HeartbeatErrors:    m.c.heartbeatErrors.Load(),
		PersistErrors:      m.c.persistErrors.Load(),
		RateLimited:        m.c.rateLimited.Load(),
		Abandoned:          m.c.abandoned.Load(),
		BusyRetries:        m.c.busyRetries.Load(),
		UnreachableRetries: m.c.unreachableRetries.Load(),
		Parked:             m.c.parked.Load(),
		ParkedTooLong:      m.c.parkedTooLong.Load(),
		Commands:           m.c.commands.Load(),
		PeerCapped:         m.c.peerCapped.Load(),
		FilesSent:          m.c.filesSent.Load(),
		FilesRefused:       m.c.filesRefused.Load(),
		DeliveryUnknown:    m.c.deliveryUnknown.Load(),
		Cursor:             m.ledger.Cursor(),
		Unacked:            unacked,
		PendingReplies:     pending,
		InFlight:           inflight,
		Polls:              m.c.pollCounts(),
		Stream: StreamStats{State: m.stream.current(), Connects: m.stream.connects.Load(),
			Wakeups: m.stream.wakeups.Load(), Events: m.stream.eventCounts()},
		Budget: m.client.Budget(),
		Chips: ChipStats{Sent: m.c.chipsSent.Load(), Coalesced: m.c.chipsCoalesced.Load(),
			Dropped: m.c.chipsDropped.Load(), Failed: m.c.chipsFailed.Load()},
	}
}
