package account

// Token usage per chat, summed over its turns and kept across restarts.
//
// A turn must cost a small, fixed write however many chats the state directory has seen, so the
// totals are kept in two files: UsageFile holds every chat's totals as of the last compaction,
// and UsageJournalFile gets one line per turn with the turn's chat's new totals, appended with
// one write(2) and not fsynced: a write the process made survives its SIGKILL (the kernel holds
// it), and an fsync per turn cost CPU and a disk round trip before each reply. Only a crash of
// the machine can lose the last lines the kernel had not written back (tens of seconds at
// most): the totals are then behind, never wrong, as a line cut short is dropped (below). The
// journal is fsynced at compaction and when the daemon stops. Compaction rewrites UsageFile from memory and empties
// the journal: at start, and when the journal has grown to the size of UsageFile (at least
// usageCompactMin), so its cost per turn is bounded by about one journal line.
//
// Journal lines hold totals, not increments, and totals only grow: reading takes, for each chat,
// the entry with the most turns across UsageFile and the journal. Replaying a line twice (a kill
// between rewriting UsageFile and emptying the journal) or finding a line older than UsageFile
// changes nothing, so the totals are exact across a SIGKILL at any point. A line cut short by a
// kill during its append is dropped, and cut off the file before the next append.

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/atomicfile"
	"github.com/molecule-ai/codex-warm/projector"
)

// UsageFile is the file in Config.StateDir that keeps each chat's token totals, beside
// sessions.json (which stays the Python daemon's format). It is current as of the last
// compaction; UsageJournalFile holds the turns since.
const UsageFile = "usage.json"

// UsageJournalFile is the file beside UsageFile with one JSON object a line: a chat's totals
// after one of its turns, {"chat_key", "input_tokens", ..., "turns"}, oldest first.
const UsageJournalFile = "usage.journal.jsonl"

// usageCompactMin is the smallest journal that triggers a compaction (about a thousand turns):
// with few chats, UsageFile is small and rewriting it often would be cheap, but each compaction
// is a rename and two fsyncs more than an append.
const usageCompactMin = 256 << 10

// ChatUsage is a chat's token usage summed over its turns.
type ChatUsage struct {
	projector.Usage
	// Turns counts the turns that reported token usage.
	Turns int64 `json:"turns"`
	// LastTurnAt is when the last of them ended; zero in files written before it was kept.
	LastTurnAt time.Time `json:"last_turn_at,omitzero"`
}

// add sums u into c as one more turn, ended at now.
func (c *ChatUsage) add(u projector.Usage, now time.Time) {
	c.LastTurnAt = now.UTC().Truncate(time.Second)
	c.InputTokens += u.InputTokens
	c.CachedInputTokens += u.CachedInputTokens
	c.OutputTokens += u.OutputTokens
	c.ReasoningOutputTokens += u.ReasoningOutputTokens
	c.TotalTokens += u.TotalTokens
	c.Turns++
}

// Usage keeps the chats' totals and journals each turn that used tokens.
type Usage struct {
	path, journalPath string
	log               *zap.Logger
	compactMin        int64
	// crashPoint, when set, is called at the points where a kill would leave the files in a state
	// of their own ("appended", "compacted"), with writeMu held: tests copy the directory there.
	crashPoint func(stage string)
	// written counts the bytes written to both files, for benchmarks.
	written atomic.Int64

	writeMu      sync.Mutex // serializes file I/O; held during it, mu is not
	journal      *os.File   // open for appending; nil without a state dir or when it cannot be opened
	journalBytes int64
	compactAt    int64

	mu    sync.Mutex
	chats map[string]ChatUsage
	dirty map[string]struct{} // chats whose totals are in no file yet
}

// usageRecord is what UsageFile holds.
type usageRecord struct {
	Chats map[string]ChatUsage `json:"chats"`
}

// usageLine is one line of UsageJournalFile.
type usageLine struct {
	ChatKey string `json:"chat_key"`
	ChatUsage
}

func NewUsage(stateDir string, log *zap.Logger) *Usage {
	u := &Usage{log: log, compactMin: usageCompactMin, chats: make(map[string]ChatUsage), dirty: make(map[string]struct{})}
	if stateDir == "" {
		return u
	}
	u.path = filepath.Join(stateDir, UsageFile)
	u.journalPath = filepath.Join(stateDir, UsageJournalFile)
	u.load()
	u.openJournal()
	return u
}

// load reads UsageFile and then the journal over it.
func (u *Usage) load() {
	b, err := atomicfile.ReadFile(u.path)
	var rec usageRecord
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		// Counts, not conversations: moved aside so a later write does not hide what it held.
		aside := u.path + ".corrupt"
		if rerr := os.Rename(u.path, aside); rerr != nil {
			aside = ""
		}
		u.log.Error("the token usage file is unreadable; totals start from the journal", zap.String("path", u.path),
			zap.String("moved_to", aside), zap.Error(err))
	default:
		for k, c := range rec.Chats {
			u.merge(k, c)
		}
	}
}

// merge keeps c as key's totals unless those known count more turns: totals only grow.
func (u *Usage) merge(key string, c ChatUsage) {
	if old, ok := u.chats[key]; !ok || c.Turns > old.Turns {
		u.chats[key] = c
	}
}

// openJournal replays the journal, compacts, and opens the journal for appending. A journal that
// cannot be read or opened is logged; the totals are then written whole after each turn, as
// before the journal existed.
func (u *Usage) openJournal() {
	f, err := atomicfile.OpenFile(u.journalPath, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		u.log.Error("cannot open the token usage journal; totals are rewritten whole after each turn",
			zap.String("path", u.journalPath), zap.Error(err))
		return
	}
	data, err := readAllFrom(f)
	if err != nil {
		f.Close()
		u.log.Error("cannot read the token usage journal; totals are rewritten whole after each turn",
			zap.String("path", u.journalPath), zap.Error(err))
		return
	}
	good, bad := u.replay(data)
	if bad > 0 || good < len(data) {
		u.log.Warn("the token usage journal had unreadable lines or a line cut short (a kill during a write); they are dropped",
			zap.String("path", u.journalPath), zap.Int("unreadable_lines", bad), zap.Int("cut_bytes", len(data)-good))
	}
	if good < len(data) {
		// The next append must start on a line of its own.
		if err := f.Truncate(int64(good)); err != nil {
			f.Close()
			u.log.Error("cannot cut the token usage journal's last line; totals are rewritten whole after each turn",
				zap.String("path", u.journalPath), zap.Error(err))
			return
		}
	}
	u.journal, u.journalBytes = f, int64(good)
	u.writeMu.Lock()
	defer u.writeMu.Unlock()
	u.compactLocked()
}

func readAllFrom(f *os.File) ([]byte, error) {
	var buf bytes.Buffer
	_, err := buf.ReadFrom(f)
	return buf.Bytes(), err
}

// replay merges the journal's complete lines into the totals. It returns the length of the
// complete lines and how many of them were unreadable.
func (u *Usage) replay(data []byte) (good, bad int) {
	for {
		i := bytes.IndexByte(data[good:], '\n')
		if i < 0 {
			return good, bad
		}
		line := data[good : good+i]
		good += i + 1
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var l usageLine
		if err := json.Unmarshal(line, &l); err != nil || l.ChatKey == "" {
			bad++
			continue
		}
		u.merge(l.ChatKey, l.ChatUsage)
	}
}

// add counts one turn of chatKey that used tokens and journals it. A turn that reported none (one
// the usage limit refused, one that never reached the model) is not counted.
func (u *Usage) Add(chatKey string, usage projector.Usage) {
	if usage == (projector.Usage{}) {
		return
	}
	u.mu.Lock()
	c := u.chats[chatKey]
	c.add(usage, time.Now())
	u.chats[chatKey] = c
	u.dirty[chatKey] = struct{}{}
	u.mu.Unlock()
	u.save()
}

// chat is chatKey's totals.
func (u *Usage) Chat(chatKey string) ChatUsage {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.chats[chatKey]
}

// all is every chat's totals.
func (u *Usage) All() map[string]ChatUsage {
	u.mu.Lock()
	defer u.mu.Unlock()
	return maps.Clone(u.chats)
}

// save appends the totals of the chats changed since the last write to the journal, in one
// write, and compacts when the journal is due. Concurrent turns share a write. A failure is
// logged: the chats stay dirty and the next turn writes them.
func (u *Usage) save() {
	if u.path == "" {
		return
	}
	u.writeMu.Lock()
	defer u.writeMu.Unlock()
	if u.journal == nil {
		u.compactLocked()
		return
	}
	u.mu.Lock()
	var buf []byte
	keys := make([]string, 0, len(u.dirty))
	for k := range u.dirty {
		line, err := json.Marshal(usageLine{ChatKey: k, ChatUsage: u.chats[k]})
		if err != nil {
			continue // a struct of a string and integers always marshals
		}
		buf = append(append(buf, line...), '\n')
		keys = append(keys, k)
	}
	clear(u.dirty)
	u.mu.Unlock()
	if len(buf) == 0 {
		return // a concurrent save wrote them
	}
	n, err := u.journal.Write(buf)
	u.journalBytes += int64(n)
	u.written.Add(int64(n))
	if err != nil {
		u.log.Warn("could not append to the token usage journal", zap.String("path", u.journalPath), zap.Error(err))
		u.mu.Lock()
		for _, k := range keys {
			u.dirty[k] = struct{}{}
		}
		u.mu.Unlock()
		if n > 0 {
			// A partial line would glue onto the next one: rewrite the whole, which empties the journal.
			u.compactLocked()
		}
		return
	}
	if u.crashPoint != nil {
		u.crashPoint("appended")
	}
	if u.journalBytes >= u.compactAt {
		u.compactLocked()
	}
}

// compactLocked writes every chat's totals to UsageFile and then empties the journal. The order
// matters: until the rename, UsageFile and the journal hold everything; after it, UsageFile does.
// Called with writeMu held.
func (u *Usage) compactLocked() {
	u.mu.Lock()
	b, err := json.MarshalIndent(usageRecord{Chats: u.chats}, "", "  ")
	dirty := maps.Clone(u.dirty)
	clear(u.dirty)
	u.mu.Unlock()
	if err == nil {
		b = append(b, '\n')
		err = atomicfile.WriteFile(u.path, b, atomicfile.Options{})
	}
	if err != nil {
		u.log.Warn("could not write the token usage file", zap.String("path", u.path), zap.Error(err))
		u.mu.Lock()
		maps.Copy(u.dirty, dirty)
		u.mu.Unlock()
		return
	}
	u.written.Add(int64(len(b)))
	u.compactAt = max(u.compactMin, int64(len(b)))
	if u.crashPoint != nil {
		u.crashPoint("compacted")
	}
	if u.journal == nil || u.journalBytes == 0 {
		return
	}
	err = u.journal.Truncate(0)
	if err == nil {
		err = u.journal.Sync()
	}
	if err != nil {
		// The lines stay: replaying them changes nothing, and the next compaction tries again.
		u.log.Warn("could not empty the token usage journal", zap.String("path", u.journalPath), zap.Error(err))
		return
	}
	u.journalBytes = 0
}

// close fsyncs and closes the journal.
func (u *Usage) Close() {
	u.writeMu.Lock()
	defer u.writeMu.Unlock()
	if u.journal != nil {
		if err := u.journal.Sync(); err != nil {
			u.log.Warn("could not flush the token usage journal", zap.String("path", u.journalPath), zap.Error(err))
		}
		u.journal.Close()
		u.journal = nil
	}
}

// oldestTurn is the earliest LastTurnAt of all chats: the chat idle the longest. ok is false
// when no chat has one.
func (u *Usage) OldestTurn() (at time.Time, ok bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, c := range u.chats {
		if !c.LastTurnAt.IsZero() && (!ok || c.LastTurnAt.Before(at)) {
			at, ok = c.LastTurnAt, true
		}
	}
	return at, ok
}

// Written counts the bytes written to both files, for benchmarks.
func (u *Usage) Written() int64 { return u.written.Load() }
