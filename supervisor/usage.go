package supervisor

// Token usage per chat, summed over its turns and kept across restarts.

import (
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"sync"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/atomicfile"
	"github.com/molecule-ai/codex-warm/projector"
)

// UsageFile is the file in Config.StateDir that keeps each chat's token totals, beside
// sessions.json (which stays the Python daemon's format).
const UsageFile = "usage.json"

// ChatUsage is a chat's token usage summed over its turns.
type ChatUsage struct {
	projector.Usage
	// Turns counts the turns that reported token usage.
	Turns int64 `json:"turns"`
}

// add sums u into c as one more turn.
func (c *ChatUsage) add(u projector.Usage) {
	c.InputTokens += u.InputTokens
	c.CachedInputTokens += u.CachedInputTokens
	c.OutputTokens += u.OutputTokens
	c.ReasoningOutputTokens += u.ReasoningOutputTokens
	c.TotalTokens += u.TotalTokens
	c.Turns++
}

// usageTotals keeps the chats' totals and writes them to UsageFile after each turn that used
// tokens.
type usageTotals struct {
	path string
	log  *zap.Logger

	writeMu sync.Mutex // serializes writes; held during I/O, mu is not
	mu      sync.Mutex
	chats   map[string]ChatUsage
	gen     uint64 // changes so far; a write carries the gen it saw
	written uint64
}

// usageRecord is what UsageFile holds.
type usageRecord struct {
	Chats map[string]ChatUsage `json:"chats"`
}

func newUsageTotals(stateDir string, log *zap.Logger) *usageTotals {
	u := &usageTotals{log: log, chats: make(map[string]ChatUsage)}
	if stateDir == "" {
		return u
	}
	u.path = filepath.Join(stateDir, UsageFile)
	b, err := atomicfile.ReadFile(u.path)
	if errors.Is(err, os.ErrNotExist) {
		return u
	}
	var rec usageRecord
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	if err != nil {
		// Counts, not conversations: moved aside so a later write does not hide what it held.
		aside := u.path + ".corrupt"
		if rerr := os.Rename(u.path, aside); rerr != nil {
			aside = ""
		}
		log.Error("the token usage file is unreadable; totals start from zero", zap.String("path", u.path),
			zap.String("moved_to", aside), zap.Error(err))
		return u
	}
	for k, c := range rec.Chats {
		u.chats[k] = c
	}
	return u
}

// add counts one turn of chatKey that used tokens and writes the totals. A turn that reported
// none (one the usage limit refused, one that never reached the model) is not counted.
func (u *usageTotals) add(chatKey string, usage projector.Usage) {
	if usage == (projector.Usage{}) {
		return
	}
	u.mu.Lock()
	c := u.chats[chatKey]
	c.add(usage)
	u.chats[chatKey] = c
	u.gen++
	u.mu.Unlock()
	u.save()
}

// chat is chatKey's totals.
func (u *usageTotals) chat(chatKey string) ChatUsage {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.chats[chatKey]
}

// all is every chat's totals.
func (u *usageTotals) all() map[string]ChatUsage {
	u.mu.Lock()
	defer u.mu.Unlock()
	return maps.Clone(u.chats)
}

// save writes UsageFile unless a later write already covered this change. A failure is logged:
// the counts stay in memory and the next turn writes them.
func (u *usageTotals) save() {
	if u.path == "" {
		return
	}
	u.writeMu.Lock()
	defer u.writeMu.Unlock()
	u.mu.Lock()
	gen := u.gen
	if gen == u.written {
		u.mu.Unlock()
		return
	}
	b, err := json.MarshalIndent(usageRecord{Chats: u.chats}, "", "  ")
	u.mu.Unlock()
	if err == nil {
		err = atomicfile.WriteFile(u.path, append(b, '\n'), atomicfile.Options{})
	}
	if err != nil {
		u.log.Warn("could not write the token usage file", zap.String("path", u.path), zap.Error(err))
		return
	}
	u.mu.Lock()
	u.written = gen
	u.mu.Unlock()
}

// Usage is each chat's token usage, summed over its turns since the state dir began.
func (s *Supervisor) Usage() map[string]ChatUsage { return s.usage.all() }

// ChatUsage is chatKey's token usage, summed over its turns.
func (s *Supervisor) ChatUsage(chatKey string) ChatUsage { return s.usage.chat(chatKey) }
