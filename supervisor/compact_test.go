package supervisor

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/childproc"
	"github.com/molecule-ai/codex-warm/internal/protocol"
	"github.com/molecule-ai/codex-warm/supervisor/chatjob"
)

// A child that cannot compact (the in-memory child has no CompactThread): the turn that finds a
// compaction due still runs, and the chat is told once; the policy does not try before every
// turn, and tries again only after as many turns.
func TestCompactUnavailableNoticeOnce(t *testing.T) {
	s, err := New(Config{Spawn: newFakeWorld().spawn, Logger: zap.NewNop(), CompactAfterTurns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	var notices []int
	for i := range 7 {
		r, err := s.Submit(context.Background(), "k", "hi")
		if err != nil {
			t.Fatalf("message %d: %v", i+1, err)
		}
		for _, n := range r.Notices {
			if strings.Contains(n, "could not be compacted") {
				notices = append(notices, i+1)
			}
		}
	}
	// Due before messages 3, 5 and 7; told at the first only.
	if len(notices) != 1 || notices[0] != 3 {
		t.Errorf("notices with messages %v, want [3]", notices)
	}
}

func TestCompactConfigNegative(t *testing.T) {
	for _, cfg := range []Config{{CompactAfterTurns: -1}, {CompactAboveBytes: -1}} {
		cfg.Spawn, cfg.Logger = newFakeWorld().spawn, zap.NewNop()
		if _, err := New(cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}

// The token updates of a compaction as codex 0.171 sends them (TestRealCompactThread): the
// summary's model call, then the compacted context's size with every component zero and the
// thread's total unchanged. Only the call is spent.
func TestCompactionUsage(t *testing.T) {
	const turn = "01a218bf-3b4d-7692-bb29-9be0e74f8177"
	ns := []protocol.Notification{
		{Method: protocol.NotifyTokenUsageUpdated, Params: json.RawMessage(`{"threadId":"t","turnId":"` + turn + `","tokenUsage":{"total":{"totalTokens":112,"inputTokens":28,"cachedInputTokens":0,"cacheWriteInputTokens":0,"outputTokens":84,"reasoningOutputTokens":0},"last":{"totalTokens":79,"inputTokens":10,"cachedInputTokens":0,"cacheWriteInputTokens":0,"outputTokens":69,"reasoningOutputTokens":0},"modelContextWindow":258400}}`)},
		{Method: protocol.NotifyTokenUsageUpdated, Params: json.RawMessage(`{"threadId":"t","turnId":"` + turn + `","tokenUsage":{"total":{"totalTokens":112,"inputTokens":28,"cachedInputTokens":0,"cacheWriteInputTokens":0,"outputTokens":84,"reasoningOutputTokens":0},"last":{"totalTokens":7072,"inputTokens":0,"cachedInputTokens":0,"cacheWriteInputTokens":0,"outputTokens":0,"reasoningOutputTokens":0},"modelContextWindow":258400}}`)},
	}
	got := chatjob.CompactionUsage(ns)
	if got.InputTokens != 10 || got.OutputTokens != 69 || got.TotalTokens != 79 {
		t.Errorf("usage %+v, want the one call: 10 in, 69 out, 79 total", got)
	}
}

// --compact-above: a child whose private memory passed the bound has its thread compacted
// before its next turn, once per child (the in-memory child cannot compact: the chat is told,
// once, and the policy does not try again in that child).
func TestCompactAboveMemoryOncePerChild(t *testing.T) {
	s, err := New(Config{
		Spawn: newFakeWorld().spawn, Logger: zap.NewNop(), CompactAboveBytes: 100 << 20,
		MemorySampleInterval: -1, // sampled by the test
		Memory: func(int) (childproc.Memory, error) {
			return childproc.Memory{RSS: 300 << 20, PSS: 250 << 20, USS: 200 << 20}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	told := func() bool {
		t.Helper()
		r, err := s.Submit(context.Background(), "k", "hi")
		if err != nil {
			t.Fatal(err)
		}
		return len(r.Notices) == 1 && strings.Contains(r.Notices[0], "could not be compacted")
	}
	if told() {
		t.Fatal("told before any memory reading")
	}
	s.pool.sampleOnce()
	if !told() {
		t.Fatal("the memory bound did not make the compaction due")
	}
	s.pool.sampleOnce()
	if told() {
		t.Error("the memory bound fired twice in one child")
	}
}
