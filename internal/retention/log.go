package retention

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/atomicfile"
	"github.com/molecule-ai/codex-warm/sessions"
)

// Events of threads-archive.jsonl lines this package writes.
const (
	EventArchiveIntent = "archive-intent"
	EventArchived      = "archived"
	EventUnarchived    = "unarchived"
	EventDeleteIntent  = "delete-intent"
	EventDeleted       = "deleted"
	// EventTold: the chat came back after its thread was deleted (or lost), started a new
	// thread and was told so, once.
	EventTold = "told"
	// EventLeft is the state of a thread a chat left (the event-less lines of
	// sessions.Store.Archive); no line carries it.
	EventLeft = "left"
)

// Line is one line of threads-archive.jsonl. Lines without Event are sessions.Store.Archive's.
type Line struct {
	ChatKey  string    `json:"chat_key"`
	ThreadID string    `json:"thread_id"`
	At       time.Time `json:"archived_at"`
	Reason   string    `json:"reason,omitempty"`
	Event    string    `json:"event,omitempty"`
	// Left marks a step on a thread its chat left (left.go), not on the chat's own thread.
	Left bool `json:"left,omitempty"`
}

// Entry is where a chat's archived thread stands: the newest retention line of the chat. For a
// thread the chat left (LeftThreads) it is the newest line of that thread.
type Entry struct {
	ChatKey, ThreadID string
	// Event is EventArchiveIntent (only until Open recovers it; a left thread's until the next
	// sweep retries it), EventArchived, EventDeleteIntent or EventDeleted; for a left thread
	// also EventLeft.
	Event string
	// At is when the thread was archived (for EventDeleted: deleted; for EventLeft: left).
	At time.Time
}

// Store is the part of *sessions.Store retention changes: the live chat key → thread map.
type Store interface {
	Get(key string) (string, bool)
	Delete(key string) error
}

var _ Store = (*sessions.Store)(nil)

// Codex is the part of an app-server client retention calls (*appserver.Client).
type Codex interface {
	ArchiveThread(ctx context.Context, threadID string) error
	UnarchiveThread(ctx context.Context, threadID string) error
	DeleteThread(ctx context.Context, threadID string) error
}

// Counts are what a Log did since Open, for metrics.
type Counts struct {
	Archived, Deleted, Unarchived, Told int64
	// Current counts the chats whose thread is archived (or deleted) and that have not come back.
	Current int64
	// Left counts the threads chats left that are not deleted yet (live or archived). Archived
	// and Deleted include the left threads archived and deleted.
	Left int64
}

// Config configures Open.
type Config struct {
	// Dir is the state directory. Required.
	Dir string
	// Store is the live map; Open finishes half-done archives in it. Required.
	Store  Store
	Logger *zap.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Log is threads-archive.jsonl and the index of archived chats read from it. Safe for
// concurrent use; the caller makes sure one chat key is worked on by one goroutine at a time.
type Log struct {
	path  string
	store Store
	log   *zap.Logger
	now   func() time.Time

	mu      sync.Mutex
	entries map[string]Entry // chat key → its archived thread
	left    map[string]Entry // thread id → a thread a chat left, until it is deleted

	archived, deleted, unarchived, told atomic.Int64
}

// Open reads dir/threads-archive.jsonl and finishes what a kill left half done: an archive
// intent without its archived line is completed (the key dropped from the store, the line
// appended). A line cut short by a kill is dropped and cut off the file.
func Open(cfg Config) (*Log, error) {
	if cfg.Dir == "" || cfg.Store == nil {
		return nil, errors.New("retention: config needs Dir and Store")
	}
	l := &Log{path: filepath.Join(cfg.Dir, sessions.ArchiveFileName), store: cfg.Store, log: cfg.Logger,
		now: cfg.Now, entries: map[string]Entry{}, left: map[string]Entry{}}
	if l.log == nil {
		l.log = zap.NewNop()
	}
	l.log = l.log.Named("retention")
	if l.now == nil {
		l.now = time.Now
	}
	if err := l.load(); err != nil {
		return nil, err
	}
	l.dropResumedLeft()
	for key, e := range l.entries {
		if e.Event != EventArchiveIntent {
			continue
		}
		if err := l.finishArchive(key, e.ThreadID, "recovered at start: the archive was cut short"); err != nil {
			return nil, err
		}
		l.log.Warn("finished an archive a stop cut short", zap.String("chat_key", key), zap.String("thread_id", e.ThreadID))
	}
	return l, nil
}

func (l *Log) load() error {
	data, err := atomicfile.ReadFile(l.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("retention: read %s: %w", l.path, err)
	}
	if i := bytes.LastIndexByte(data, '\n'); i+1 != len(data) {
		// A kill cut the last append short: that step never completed. Cut it off so that the
		// next append starts a line of its own.
		l.log.Warn("dropping a line cut short", zap.String("path", l.path), zap.Int("bytes", len(data)-i-1))
		if err := os.Truncate(l.path, int64(i+1)); err != nil {
			return fmt.Errorf("retention: cut %s: %w", l.path, err)
		}
		data = data[:i+1]
	}
	for _, raw := range bytes.Split(data, []byte{'\n'}) {
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		var ln Line
		if err := json.Unmarshal(raw, &ln); err != nil {
			l.log.Warn("skipping an unreadable line", zap.String("path", l.path), zap.Error(err))
			continue
		}
		l.apply(ln)
	}
	return nil
}

// apply moves the index by one line.
func (l *Log) apply(ln Line) {
	if ln.Event == "" || ln.Left {
		l.applyLeft(ln)
		return
	}
	switch ln.Event {
	case EventArchiveIntent, EventArchived:
		// A thread archived as a chat's is no longer one it left (a kill cut the leave short).
		delete(l.left, ln.ThreadID)
		l.entries[ln.ChatKey] = Entry{ChatKey: ln.ChatKey, ThreadID: ln.ThreadID, Event: ln.Event, At: ln.At}
	case EventDeleteIntent, EventDeleted:
		if e, ok := l.entries[ln.ChatKey]; ok && e.ThreadID == ln.ThreadID {
			e.Event = ln.Event
			if ln.Event == EventDeleted {
				e.At = ln.At
			}
			l.entries[ln.ChatKey] = e
		}
	case EventUnarchived, EventTold:
		delete(l.entries, ln.ChatKey)
	}
}

// append writes ln (fsynced) and then applies it to the index.
func (l *Log) append(ln Line) error {
	ln.At = l.now().UTC()
	b, err := json.Marshal(ln)
	if err != nil {
		return fmt.Errorf("retention: %s chat %s: %w", ln.Event, ln.ChatKey, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	f, err := atomicfile.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("retention: %s chat %s: %w", ln.Event, ln.ChatKey, err)
	}
	_, werr := f.Write(append(b, '\n'))
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("retention: %s chat %s thread %s to %s: %w", ln.Event, ln.ChatKey, ln.ThreadID, l.path, werr)
	}
	l.apply(ln)
	return nil
}

// Lookup returns chatKey's archived thread, if it has one that is not back in use.
func (l *Log) Lookup(chatKey string) (Entry, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.entries[chatKey]
	return e, ok
}

// Entries returns a copy of the index: chat key → archived thread.
func (l *Log) Entries() map[string]Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := make(map[string]Entry, len(l.entries))
	for k, e := range l.entries {
		m[k] = e
	}
	return m
}

// Counts returns what the Log did since Open.
func (l *Log) Counts() Counts {
	l.mu.Lock()
	n, left := len(l.entries), len(l.left)
	l.mu.Unlock()
	return Counts{Archived: l.archived.Load(), Deleted: l.deleted.Load(), Unarchived: l.unarchived.Load(), Told: l.told.Load(),
		Current: int64(n), Left: int64(left)}
}

// Path is the file's path.
func (l *Log) Path() string { return l.path }
