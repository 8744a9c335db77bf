package molecule

import (
	"sync"

	"github.com/molecule-ai/codex-warm/internal/idring"
)

// One canvas message brings three events, all naming its message_id (MOLECULE.md section 9):
// ACTIVITY_LOGGED "(ingest)" before its row is written, then USER_MESSAGE and ACTIVITY_LOGGED
// "(queued for poll)". Each used to wake a poll. announcements keeps what the events announced
// since the last poll began and the message ids the polls read, so that an event whose message
// was already read wakes nothing, and a poll queued behind a running one is skipped when that
// one read everything announced meanwhile.

// maxAnnounced bounds the ids announced and not read yet: past it the next poll runs anyway.
const maxAnnounced = 256

// announcements is shared by the stream (announce) and the poll loop (began, read, needed).
type announcements struct {
	mu      sync.Mutex
	read    *idring.Ring        // message ids of rows the polls read
	pending map[string]struct{} // ids announced since the last poll began, not read then
	anon    bool                // an event without an id (or too many ids) since then
}

func newAnnouncements(capacity int) *announcements {
	return &announcements{read: idring.New(capacity), pending: make(map[string]struct{})}
}

// announce records an event that may mean a new row, and reports whether it should wake a
// poll: not when its message was already read.
func (a *announcements) announce(messageID string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case messageID == "" || len(a.pending) >= maxAnnounced:
		a.anon = true
	case a.read.Has(messageID):
		return false
	default:
		a.pending[messageID] = struct{}{}
	}
	return true
}

// force makes the next poll woken needed whatever was read (a delegation's re-poll).
func (a *announcements) force() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.anon = true
}

// began says a poll begins: it reads whatever was announced until now.
func (a *announcements) began() {
	a.mu.Lock()
	defer a.mu.Unlock()
	clear(a.pending)
	a.anon = false
}

// readMessage records a row's message id as read.
func (a *announcements) readMessage(messageID string) {
	if messageID == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.read.Add(messageID)
	delete(a.pending, messageID)
}

// needed reports whether a poll woken by events would read something the last poll did not:
// an event without an id, or a message announced and not read.
func (a *announcements) needed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for id := range a.pending {
		if a.read.Has(id) {
			delete(a.pending, id)
		}
	}
	return a.anon || len(a.pending) > 0
}
