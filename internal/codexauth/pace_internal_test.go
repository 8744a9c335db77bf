package codexauth

import (
	"go.uber.org/zap"
	"testing"
	"time"
)

// Pacing: tokens that live less than RefreshAhead, or a host clock minutes fast, are refreshed
// once per half-life, not in a loop; more calls than the cap in a minute are refused.
func TestPacing(t *testing.T) {
	m := &Manager{cfg: Config{RefreshAhead: 5 * time.Minute, MaxPerMinute: 3}}
	now := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		name        string
		issued, exp time.Time
		want        time.Time
	}{
		{"hour token: 5 minutes ahead", now, now.Add(time.Hour), now.Add(55 * time.Minute)},
		{"2-minute token: half its life", now, now.Add(2 * time.Minute), now.Add(time.Minute)},
		{"10-minute token: the later of both", now, now.Add(10 * time.Minute), now.Add(5 * time.Minute)},
		{"no iat: from the daemon's last refresh", time.Time{}, now.Add(2 * time.Minute), now.Add(time.Minute)},
	} {
		m.lastRefresh = now
		if got := m.dueAt(Tokens{Issued: tc.issued, Expires: tc.exp}); !got.Equal(tc.want) {
			t.Errorf("%s: due at %v, want %v", tc.name, got.Sub(now), tc.want.Sub(now))
		}
	}
	m.log = nopLogger()
	m.spent = map[string]bool{}
	for i := range 3 {
		if err := m.pace(now.Add(time.Duration(i) * time.Second)); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if err := m.pace(now.Add(10 * time.Second)); err == nil {
		t.Fatal("a 4th call in a minute was not refused")
	}
	if m.Status().LastOutcome != OutcomePaced {
		t.Errorf("outcome %q", m.Status().LastOutcome)
	}
	if err := m.pace(now.Add(61 * time.Second)); err != nil {
		t.Errorf("a call after the minute: %v", err)
	}
}

func nopLogger() *zap.Logger { return zap.NewNop() }
