package retention

import (
	"context"
	"fmt"
	"sort"
	"time"

	"go.uber.org/zap"
)

// The steps of Archive, each a function so that a test can stop between them as a kill would.

// intend records that chatKey's thread is about to be archived.
func (l *Log) intend(chatKey, threadID string) error {
	return l.append(Line{ChatKey: chatKey, ThreadID: threadID, Event: EventArchiveIntent})
}

// finishArchive drops chatKey from the store when it still maps to threadID and records the
// thread archived.
func (l *Log) finishArchive(chatKey, threadID, reason string) error {
	if id, ok := l.store.Get(chatKey); ok && id == threadID {
		if err := l.store.Delete(chatKey); err != nil {
			return fmt.Errorf("retention: drop chat %s (thread %s) from the live state: %w", chatKey, threadID, err)
		}
	}
	if err := l.append(Line{ChatKey: chatKey, ThreadID: threadID, Event: EventArchived, Reason: reason}); err != nil {
		return err
	}
	l.archived.Add(1)
	return nil
}

// Archive archives chatKey's thread threadID with codex's thread/archive and takes the chat out
// of the live state, recording each step. No child may hold the thread (codex refuses with
// "active writer"): the caller retires the chat's child first and keeps the chat's messages out
// until Archive returns. When codex refuses, the intent is recorded as undone (an unarchived
// line) and the chat stays live.
func (l *Log) Archive(ctx context.Context, c Codex, chatKey, threadID, reason string) error {
	if err := l.intend(chatKey, threadID); err != nil {
		return err
	}
	if err := c.ArchiveThread(ctx, threadID); err != nil {
		if uerr := l.append(Line{ChatKey: chatKey, ThreadID: threadID, Event: EventUnarchived, Reason: "archive failed: " + err.Error()}); uerr != nil {
			// Open finishes the intent: the chat leaves the live state with its rollout in
			// place, and comes back as an archived chat would.
			l.log.Error("could not record a failed archive", zap.String("chat_key", chatKey), zap.Error(uerr))
		}
		return fmt.Errorf("retention: chat %s: %w", chatKey, err)
	}
	return l.finishArchive(chatKey, threadID, reason)
}

// Delete deletes chatKey's archived thread for good with codex's thread/delete, which removes
// the rollout from CODEX_HOME/archived_sessions. A failure leaves the intent recorded for the
// next sweep to retry.
func (l *Log) Delete(ctx context.Context, c Codex, chatKey string) error {
	e, ok := l.Lookup(chatKey)
	if !ok {
		return nil
	}
	return l.deleteEntry(ctx, c, e, false)
}

// deleteEntry runs Delete's steps on e, a chat's archived thread or (left) a thread it left.
func (l *Log) deleteEntry(ctx context.Context, c Codex, e Entry, left bool) error {
	if e.Event != EventArchived && e.Event != EventDeleteIntent {
		return nil
	}
	what := "chat " + e.ChatKey
	if left {
		what += " left thread"
	}
	retry := e.Event == EventDeleteIntent
	if !retry {
		if err := l.append(Line{ChatKey: e.ChatKey, ThreadID: e.ThreadID, Event: EventDeleteIntent, Left: left}); err != nil {
			return err
		}
	}
	if err := c.DeleteThread(ctx, e.ThreadID); err != nil {
		if !retry {
			return fmt.Errorf("retention: %s: %w", what, err)
		}
		// A retry after a kill: the first call may have deleted it already, and codex says the
		// same (-32600) for a thread it has not and for one it cannot delete. Recorded, so it
		// is not retried for ever; a rollout that did survive is still unarchived should the
		// chat come back.
		l.log.Warn("retried delete failed; recording the thread deleted", zap.String("chat_key", e.ChatKey),
			zap.String("thread_id", e.ThreadID), zap.Bool("left", left), zap.Error(err))
	}
	if err := l.append(Line{ChatKey: e.ChatKey, ThreadID: e.ThreadID, Event: EventDeleted, Left: left}); err != nil {
		return err
	}
	l.deleted.Add(1)
	return nil
}

// Unarchived records that chatKey's archived thread is live again (unarchived and resumed).
func (l *Log) Unarchived(chatKey, threadID string) error {
	if err := l.append(Line{ChatKey: chatKey, ThreadID: threadID, Event: EventUnarchived}); err != nil {
		return err
	}
	l.unarchived.Add(1)
	return nil
}

// Told records that chatKey came back to a thread that is gone, started newThread and was told.
func (l *Log) Told(chatKey, oldThread, newThread string) error {
	if err := l.append(Line{ChatKey: chatKey, ThreadID: oldThread, Event: EventTold, Reason: "new thread " + newThread}); err != nil {
		return err
	}
	l.told.Add(1)
	return nil
}

// Candidate is a chat a sweep works on.
type Candidate struct {
	ChatKey, ThreadID string
	// Since is the chat's last turn (to archive) or when it was archived (to delete); for a
	// left thread, when the chat left it (to archive).
	Since time.Time
	// Left is set for a thread the chat left (/new): ArchiveLeft and DeleteLeft work on it, and
	// the chat itself is not touched.
	Left bool `json:",omitempty"`
}

// Plan is what a sweep would do now.
type Plan struct {
	Archive, Delete []Candidate
}

// Policy says what is old enough. A zero duration turns that part off.
type Policy struct {
	IdleAfter, DeleteAfter time.Duration
	// UploadsAfter is the age past which the files users sent to chats are removed, whatever
	// became of the chat (the caller does it; Plan does not list files).
	UploadsAfter time.Duration
}

// Any reports whether the policy does anything.
func (p Policy) Any() bool { return p.IdleAfter > 0 || p.DeleteAfter > 0 || p.UploadsAfter > 0 }

// Plan lists the chats of live (chat key → thread id) whose last turn (lastTurn; a chat without
// one is left alone) is IdleAfter or more ago, and the archived threads archived DeleteAfter or
// more ago, plus deletions a kill cut short; and the threads chats left, by the same ages
// (planLeft). Oldest first.
func (l *Log) Plan(p Policy, live map[string]string, lastTurn func(key string) (time.Time, bool)) Plan {
	now := l.now()
	var plan Plan
	if p.IdleAfter > 0 {
		for key, id := range live {
			at, ok := lastTurn(key)
			if ok && now.Sub(at) >= p.IdleAfter {
				plan.Archive = append(plan.Archive, Candidate{ChatKey: key, ThreadID: id, Since: at})
			}
		}
	}
	for key, e := range l.Entries() {
		due := p.DeleteAfter > 0 && e.Event == EventArchived && now.Sub(e.At) >= p.DeleteAfter
		if due || e.Event == EventDeleteIntent {
			plan.Delete = append(plan.Delete, Candidate{ChatKey: key, ThreadID: e.ThreadID, Since: e.At})
		}
	}
	l.planLeft(&plan, p, live, now)
	for _, cs := range [][]Candidate{plan.Archive, plan.Delete} {
		sort.Slice(cs, func(i, j int) bool { return cs[i].Since.Before(cs[j].Since) })
	}
	return plan
}
