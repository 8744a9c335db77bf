package chatjob

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

func TestPlanFindsTheNthExchange(t *testing.T) {
	turns := []appserver.HistoryTurn{ // newest first
		{ID: "t4", UserTexts: []string{"fourth"}, Files: []string{"b.go"}},
		{ID: "t3", UserTexts: []string{"third"}, Files: []string{"a.go", "b.go"}},
		{ID: "t2", UserTexts: []string{"second"}},
		{ID: "c", Compaction: true},
		{ID: "t1", UserTexts: []string{"first"}},
	}
	before, res, err := plan(turns, 2)
	if err != nil || before != "t3" || !slices.Equal(res.Messages, []string{"third", "fourth"}) || !slices.Equal(res.Files, []string{"b.go", "a.go"}) {
		t.Errorf("undo 2: before %q %+v %v", before, res, err)
	}
	if _, _, err := plan(turns, 4); !errors.Is(err, ErrUndoCompacted) {
		t.Errorf("undo across the compaction: %v", err)
	}
	var rng *UndoRangeError
	if _, _, err := plan(turns[:2], 3); !errors.As(err, &rng) || rng.Exchanges != 2 {
		t.Errorf("undo beyond the start: %v", err)
	}
	if _, _, err := plan(nil, 1); !errors.As(err, &rng) || rng.Exchanges != 0 {
		t.Errorf("undo on an empty thread: %v", err)
	}
}

func usageNote(t *testing.T, last protocol.TokenUsageBreakdown) protocol.Notification {
	t.Helper()
	b, err := json.Marshal(protocol.TokenUsageNotification{ThreadID: "th", TurnID: "tu", TokenUsage: protocol.ThreadTokenUsage{Last: last, Total: last}})
	if err != nil {
		t.Fatal(err)
	}
	return protocol.Notification{Method: protocol.NotifyTokenUsageUpdated, Params: b}
}

// A compaction as codex 0.171 reports it: the summary's model call, then the compacted
// context's size with every component zero.
func TestCompactionSizes(t *testing.T) {
	ns := []protocol.Notification{
		usageNote(t, protocol.TokenUsageBreakdown{TotalTokens: 5300, InputTokens: 5000, OutputTokens: 300}),
		usageNote(t, protocol.TokenUsageBreakdown{TotalTokens: 900}),
	}
	if b, a := compactionSizes(ns); b != 5000 || a != 900 {
		t.Errorf("sizes %d → %d, want 5000 → 900", b, a)
	}
	if u := CompactionUsage(ns); u.InputTokens != 5000 || u.OutputTokens != 300 {
		t.Errorf("usage %+v: the size update counted as a model call", u)
	}
}
