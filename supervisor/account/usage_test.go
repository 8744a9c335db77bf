package account

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/atomicfile"
	"github.com/molecule-ai/codex-warm/projector"
)

var oneTurn = projector.Usage{InputTokens: 100, CachedInputTokens: 40, OutputTokens: 7, ReasoningOutputTokens: 3, TotalTokens: 107}

// A turn's write does not grow with the chats the state dir knows: at 2 and at 300 known chats a
// turn costs one journal line, compactions included (they come once the journal is as large as
// usage.json, so they add at most about one line per turn).
func TestUsageWritePerTurnIsConstant(t *testing.T) {
	perTurn := map[int]float64{}
	for _, chats := range []int{2, 300} {
		dir := t.TempDir()
		seedUsage(t, dir, chats)
		u := NewUsage(dir, zap.NewNop())
		compactEarly(u)
		start, compacted := u.written.Load(), 0
		u.crashPoint = func(stage string) {
			if stage == "compacted" {
				compacted++
			}
		}
		const turns = 600
		for range turns {
			u.Add("canvas:warm", oneTurn)
		}
		perTurn[chats] = float64(u.written.Load()-start) / turns
		if got := u.Chat("canvas:warm"); got.Turns != turns || got.InputTokens != 100*turns {
			t.Fatalf("%d chats: totals %+v", chats, got)
		}
		if chats == 300 && compacted == 0 {
			t.Errorf("%d chats: no compaction in %d turns (journal %d B)", chats, turns, u.journalBytes)
		}
		u.Close()
		if n := len(NewUsage(dir, zap.NewNop()).All()); n != chats+1 {
			t.Errorf("%d chats: %d after a restart", chats, n)
		}
	}
	b, err := json.Marshal(usageLine{ChatKey: "canvas:warm", ChatUsage: ChatUsage{Usage: oneTurn, Turns: 100, LastTurnAt: time.Now().UTC().Truncate(time.Second)}})
	if err != nil {
		t.Fatal(err)
	}
	line := float64(len(b) + 1)
	for chats, got := range perTurn {
		// Each compaction rewrites usage.json once the journal has grown as large: at most
		// about one more line per turn.
		if got < line || got > 2.2*line {
			t.Errorf("a turn at %d known chats writes %.0f B, want one journal line (%.0f B) and at most as much again for compaction", chats, got, line)
		}
	}
}

// A kill cuts the journal's last line short: reopening drops that line (its turn's add had not
// returned), keeps every other total, and the next line starts on a line of its own.
func TestUsageJournalCutMidLine(t *testing.T) {
	dir := t.TempDir()
	u := NewUsage(dir, zap.NewNop())
	u.Add("canvas:a", oneTurn)
	u.Add("peer:b", oneTurn)
	before := u.All()
	u.Add("canvas:a", oneTurn)
	u.Close()
	jp := filepath.Join(dir, UsageJournalFile)
	fi, err := os.Stat(jp)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(jp, fi.Size()-10); err != nil {
		t.Fatal(err)
	}
	u2 := NewUsage(dir, zap.NewNop())
	if got := u2.All(); !maps.Equal(got, before) {
		t.Fatalf("after a cut line: %+v, want %+v", got, before)
	}
	u2.Add("canvas:a", oneTurn)
	u2.Close()
	if got := NewUsage(dir, zap.NewNop()).Chat("canvas:a"); got.Turns != 2 || got.TotalTokens != 2*oneTurn.TotalTokens {
		t.Errorf("after the next turn and a restart: %+v, want 2 turns", got)
	}
}

// The journal's cut line is repaired even when nothing compacts it away: usage.json cannot be
// written (a non-empty directory where it goes, which cannot be moved aside either, because one
// is in the aside name's way too), so the journal keeps its lines and appends after them.
func TestUsageJournalCutWithoutCompaction(t *testing.T) {
	dir := t.TempDir()
	jp := filepath.Join(dir, UsageJournalFile)
	if err := os.WriteFile(jp, []byte(`{"chat_key":"canvas:a","input_tokens":5,"turns":1}`+"\n"+`{"chat_key":"canvas:a","inp`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{UsageFile, UsageFile + ".corrupt"} {
		if err := os.MkdirAll(filepath.Join(dir, d, "x"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	u := NewUsage(dir, zap.NewNop())
	u.Add("canvas:a", oneTurn)
	u.Close()
	if fi, err := os.Stat(filepath.Join(dir, UsageFile)); err != nil || !fi.IsDir() {
		t.Fatalf("usage.json was replaced (%v): the test needs the compaction to fail", err)
	}
	for _, d := range []string{UsageFile, UsageFile + ".corrupt"} {
		if err := os.RemoveAll(filepath.Join(dir, d)); err != nil {
			t.Fatal(err)
		}
	}
	if got := NewUsage(dir, zap.NewNop()).Chat("canvas:a"); got.Turns != 2 || got.InputTokens != 5+oneTurn.InputTokens {
		t.Errorf("after a restart: %+v, want 2 turns and %d input tokens", got, 5+oneTurn.InputTokens)
	}
}

// A SIGKILL leaves the files as they are at any point of a write. Copies of the directory taken
// just after an append and just after usage.json was replaced (before the journal is emptied,
// so its lines are replayed over the totals that already hold them) each read back exactly the
// totals the daemon had.
func TestUsageExactAcrossKillPoints(t *testing.T) {
	dir := t.TempDir()
	seedUsage(t, dir, 20)
	u := NewUsage(dir, zap.NewNop())
	compactEarly(u)
	type point struct {
		stage, dir string
		want       map[string]ChatUsage
	}
	var points []point
	u.crashPoint = func(stage string) {
		c := t.TempDir()
		for _, name := range []string{UsageFile, UsageJournalFile} {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(c, name), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		points = append(points, point{stage, c, u.All()})
	}
	for i := range 40 {
		u.Add(fmt.Sprintf("canvas:%d", i%3), oneTurn)
	}
	stages := map[string]int{}
	for _, p := range points {
		stages[p.stage]++
		if got := NewUsage(p.dir, zap.NewNop()).All(); !maps.Equal(got, p.want) {
			t.Fatalf("killed %s: read back %d chats that differ from the %d the daemon had", p.stage, len(got), len(p.want))
		}
	}
	if stages["appended"] != 40 || stages["compacted"] == 0 {
		t.Errorf("kill points seen: %v, want 40 appends and at least one compaction", stages)
	}
}

// Totals only grow: a journal line older than usage.json (written before a compaction that a
// kill kept from emptying the journal) does not take a chat's totals back.
func TestUsageOlderJournalLineIgnored(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, UsageFile), []byte(`{"chats":{"canvas:a":{"input_tokens":60,"turns":6}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, UsageJournalFile), []byte(`{"chat_key":"canvas:a","input_tokens":50,"turns":5}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := NewUsage(dir, zap.NewNop()).Chat("canvas:a"); got.Turns != 6 || got.InputTokens != 60 {
		t.Errorf("totals %+v, want the 6 turns of usage.json", got)
	}
}

// compactEarly makes u compact as soon as its journal is as large as usage.json, however small.
func compactEarly(u *Usage) {
	u.writeMu.Lock()
	defer u.writeMu.Unlock()
	u.compactMin = 0
	u.compactLocked()
}

// Each chat's last turn is kept with its totals, through the journal and a restart, and the
// chat idle the longest is found from them.
func TestUsageLastTurnAndOldestIdle(t *testing.T) {
	dir := t.TempDir()
	u := NewUsage(dir, zap.NewNop())
	if _, ok := u.OldestTurn(); ok {
		t.Fatal("an empty state has an oldest turn")
	}
	before := time.Now().Add(-time.Second)
	u.Add("canvas:a", oneTurn)
	u.Add("peer:b", oneTurn)
	u.Close()
	// An older chat, as a usage.json from a month ago leaves it.
	old := time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC)
	u2 := NewUsage(dir, zap.NewNop())
	u2.mu.Lock()
	u2.chats["canvas:old"] = ChatUsage{Usage: oneTurn, Turns: 1, LastTurnAt: old}
	u2.mu.Unlock()
	compactEarly(u2)
	u2.Close()
	u3 := NewUsage(dir, zap.NewNop())
	if a := u3.Chat("canvas:a").LastTurnAt; a.Before(before.Truncate(time.Second)) || a.After(time.Now()) {
		t.Errorf("canvas:a last turn %v, want about now", a)
	}
	if at, ok := u3.OldestTurn(); !ok || !at.Equal(old) {
		t.Errorf("oldest turn %v %v, want %v", at, ok, old)
	}
}

// seedUsage writes a usage.json that knows n chats, as a state dir that has seen them holds.
func seedUsage(tb testing.TB, dir string, n int) {
	tb.Helper()
	rec := usageRecord{Chats: make(map[string]ChatUsage, n)}
	for i := range n {
		k := fmt.Sprintf("canvas:%08d-0000-4000-8000-000000000000", i)
		rec.Chats[k] = ChatUsage{Usage: projector.Usage{InputTokens: 123456, CachedInputTokens: 100000, OutputTokens: 2345, TotalTokens: 125801}, Turns: 42}
	}
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		tb.Fatal(err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, UsageFile), data, atomicfile.Options{}); err != nil {
		tb.Fatal(err)
	}
}
