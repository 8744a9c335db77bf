package supervisor

import (
	"context"
	"strings"
	"testing"

	"go.uber.org/zap"
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
