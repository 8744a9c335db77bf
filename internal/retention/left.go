package retention

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// Threads chats left. sessions.Store.Archive appends a line without an event for every thread a
// chat leaves (/new, a thread codex could not resume); the chat goes on with a new thread and
// nothing resumes the old one. The Log keeps these by thread id, apart from the chats' own
// entries (a chat key can have one archived thread and any number of left ones), and a sweep
// archives a left thread once it has been left for Policy.IdleAfter and deletes it
// Policy.DeleteAfter after that, as it does a chat's thread. A returning chat never brings one
// back: Lookup sees only the chat's own thread.
//
// The steps are recorded as lines with Left set: archive-intent, codex's thread/archive,
// archived (the live state is not touched: the chat is already on another thread); then
// delete-intent, thread/delete, deleted, after which the thread is forgotten. An intent without
// its result is retried by the next sweep, and a retry codex refuses is recorded done: codex
// answers -32600 both for a thread the first call already moved and for one it never had.

// applyLeft moves the left-thread index by one line (an event-less one or one with Left set).
func (l *Log) applyLeft(ln Line) {
	switch ln.Event {
	case "":
		l.left[ln.ThreadID] = Entry{ChatKey: ln.ChatKey, ThreadID: ln.ThreadID, Event: EventLeft, At: ln.At}
	case EventArchiveIntent, EventArchived, EventDeleteIntent:
		if e, ok := l.left[ln.ThreadID]; ok {
			e.Event = ln.Event
			if ln.Event == EventArchived {
				e.At = ln.At
			}
			l.left[ln.ThreadID] = e
		}
	case EventDeleted:
		delete(l.left, ln.ThreadID)
	}
}

// dropResumedLeft forgets the left threads that are their chat's live thread: a kill between
// sessions.Store.Archive's line and its sessions.json write left the chat on the thread.
func (l *Log) dropResumedLeft() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, e := range l.left {
		if cur, ok := l.store.Get(e.ChatKey); ok && cur == id {
			l.log.Warn("a chat is still on a thread recorded as left; it stays live", zap.String("chat_key", e.ChatKey),
				zap.String("thread_id", id))
			delete(l.left, id)
		}
	}
}

// Left records in the index that chatKey left threadID at at, after sessions.Store.Archive wrote
// its line (Open reads that line back after a restart; this spares a reread of the file).
func (l *Log) Left(chatKey, threadID string, at time.Time) {
	if threadID == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.left[threadID] = Entry{ChatKey: chatKey, ThreadID: threadID, Event: EventLeft, At: at.UTC()}
}

// LeftThreads returns a copy of the index of threads chats left and that are not deleted yet.
func (l *Log) LeftThreads() []Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	es := make([]Entry, 0, len(l.left))
	for _, e := range l.left {
		es = append(es, e)
	}
	return es
}

func (l *Log) leftEntry(threadID string) (Entry, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.left[threadID]
	return e, ok
}

// ArchiveLeft archives threadID, a thread its chat left, with codex's thread/archive. A first
// failure leaves the intent for the next sweep; a failed retry is recorded archived.
func (l *Log) ArchiveLeft(ctx context.Context, c Codex, threadID, reason string) error {
	e, ok := l.leftEntry(threadID)
	if !ok || (e.Event != EventLeft && e.Event != EventArchiveIntent) {
		return nil
	}
	if cur, live := l.store.Get(e.ChatKey); live && cur == threadID {
		return fmt.Errorf("retention: chat %s: left thread %s is its live thread", e.ChatKey, threadID)
	}
	retry := e.Event == EventArchiveIntent
	if !retry {
		if err := l.append(Line{ChatKey: e.ChatKey, ThreadID: threadID, Event: EventArchiveIntent, Left: true}); err != nil {
			return err
		}
	}
	if err := c.ArchiveThread(ctx, threadID); err != nil {
		if !retry {
			return fmt.Errorf("retention: chat %s left thread: %w", e.ChatKey, err)
		}
		l.log.Warn("retried archive of a left thread failed; recording it archived", zap.String("chat_key", e.ChatKey),
			zap.String("thread_id", threadID), zap.Error(err))
	}
	if err := l.append(Line{ChatKey: e.ChatKey, ThreadID: threadID, Event: EventArchived, Reason: reason, Left: true}); err != nil {
		return err
	}
	l.archived.Add(1)
	return nil
}

// DeleteLeft deletes threadID, an archived thread its chat left, for good with codex's
// thread/delete, as Delete does a chat's thread; the thread is then forgotten.
func (l *Log) DeleteLeft(ctx context.Context, c Codex, threadID string) error {
	e, ok := l.leftEntry(threadID)
	if !ok {
		return nil
	}
	return l.deleteEntry(ctx, c, e, true)
}

// planLeft adds to plan the left threads due: left IdleAfter or more ago (or with an archive
// intent a kill or a failure left), archived DeleteAfter or more ago (or with a delete intent).
// A thread that is a live thread of live (chat key → thread id) is never listed.
func (l *Log) planLeft(plan *Plan, p Policy, live map[string]string, now time.Time) {
	inUse := make(map[string]bool, len(live))
	for _, id := range live {
		inUse[id] = true
	}
	for _, e := range l.LeftThreads() {
		if inUse[e.ThreadID] {
			continue
		}
		c := Candidate{ChatKey: e.ChatKey, ThreadID: e.ThreadID, Since: e.At, Left: true}
		switch e.Event {
		case EventLeft:
			if p.IdleAfter > 0 && now.Sub(e.At) >= p.IdleAfter {
				plan.Archive = append(plan.Archive, c)
			}
		case EventArchiveIntent:
			plan.Archive = append(plan.Archive, c)
		case EventArchived:
			if p.DeleteAfter > 0 && now.Sub(e.At) >= p.DeleteAfter {
				plan.Delete = append(plan.Delete, c)
			}
		case EventDeleteIntent:
			plan.Delete = append(plan.Delete, c)
		}
	}
}
