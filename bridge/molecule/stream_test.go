package molecule

import (
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

// streamConfig is production's intervals with the event stream on.
func streamConfig(c *Config) {
	c.EventStream = true
	c.PollInterval = DefaultPollInterval
	c.SafetyPollInterval = DefaultSafetyPollInterval
	c.HeartbeatInterval = DefaultHeartbeatInterval
}

// countCalls counts p's calls after the first from, by route; heartbeats and /state are not the
// poll's cost and are left out.
func countCalls(p *moleculetest.Platform, from int) (polls, connects, other int) {
	for _, c := range p.Calls()[from:] {
		switch c.Route {
		case moleculetest.RouteActivity:
			polls++
		case moleculetest.RouteEvents:
			connects++
		case moleculetest.RouteHeartbeat, moleculetest.RouteState:
		default:
			other++
		}
	}
	return polls, connects, other
}

// An idle workspace with the stream up costs the safety poll, 2 a minute, and nothing else: our
// own heartbeats come back on the stream and keep it alive without a reconnect.
func TestStreamIdleCost(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	synctest.Test(t, func(t *testing.T) {
		m, stop := bubbleInbox(t, p, t.TempDir(), chattest.NewAnswerer(nil), streamConfig)
		time.Sleep(time.Minute) // connected, caught up, settled
		if st := m.Stats().Stream.State; st != StreamConnected {
			t.Fatalf("stream %s after a minute, want connected", st)
		}
		from := len(p.Calls())
		time.Sleep(10 * time.Minute)
		polls, connects, other := countCalls(p, from)
		stop()
		if polls > 2*10+1 || connects != 0 || other != 0 {
			t.Errorf("10 idle minutes: %d polls, %d connects, %d other calls; want at most 21 polls and nothing else", polls, connects, other)
		}
		if s := m.Stats(); s.Polls["interval"] != 0 || s.Stream.Events["WORKSPACE_HEARTBEAT"] < 25 {
			t.Errorf("polls %v, events %v", s.Polls, s.Stream.Events)
		}
	})
}

// A platform without the stream (404): polling every --poll-interval as before, and the route
// tried again every 10 minutes only.
func TestStreamAbsentPollsAsBefore(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{NoEventStream: true})
	synctest.Test(t, func(t *testing.T) {
		m, stop := bubbleInbox(t, p, t.TempDir(), chattest.NewAnswerer(nil), streamConfig)
		time.Sleep(time.Hour)
		polls, connects, _ := countCalls(p, 0)
		p.Enqueue(moleculetest.CanvasMessage("still answered"))
		time.Sleep(DefaultPollInterval + time.Second)
		stop()
		if connects > 7 {
			t.Errorf("the missing route was asked %d times in an hour, want at most 7", connects)
		}
		if want := int(time.Hour / DefaultPollInterval); polls < want-2 || polls > want+2 {
			t.Errorf("%d polls in an hour, want about %d (every --poll-interval)", polls, want)
		}
		if s := m.Stats(); s.Stream.State != StreamAbsent || len(p.Notifies()) != 1 {
			t.Errorf("stream %s, replies %d", s.Stream.State, len(p.Notifies()))
		}
	})
}

// A lossy stream (half the events dropped, the stream cut every 10 s): every message is
// answered exactly once, none later than the safety poll's 30 s.
func TestStreamLossyAnswersEveryMessageOnce(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{EventDropRate: 0.5, EventCutEvery: 10 * time.Second, Seed: 7})
	synctest.Test(t, func(t *testing.T) {
		m, stop := bubbleInbox(t, p, t.TempDir(), chattest.NewAnswerer(nil), streamConfig)
		time.Sleep(5 * time.Second)
		rng := rand.New(rand.NewPCG(1, 2))
		const msgs = 30
		worst := time.Duration(0)
		for i := range msgs {
			time.Sleep(time.Duration(rng.Int64N(int64(20 * time.Second))))
			p.Enqueue(moleculetest.CanvasMessage("lossy " + string(rune('A'+i%26)) + string(rune('a'+i/26))))
			start := time.Now()
			for len(p.Notifies()) < i+1 {
				if time.Since(start) > time.Minute {
					t.Fatalf("message %d not answered within a minute", i+1)
				}
				time.Sleep(100 * time.Millisecond)
			}
			worst = max(worst, time.Since(start))
		}
		stop()
		if worst > DefaultSafetyPollInterval+time.Second {
			t.Errorf("a message waited %s, want at most the safety poll's %s", worst, DefaultSafetyPollInterval)
		}
		if n := len(p.Notifies()); n != msgs {
			t.Errorf("%d replies for %d messages", n, msgs)
		}
		s := m.Stats()
		if p.EventsDropped() == 0 || p.StreamConnects() < 10 || s.Polls["event"] == 0 {
			t.Errorf("the stream was not lossy or not used: dropped %d, connects %d, polls %v", p.EventsDropped(), p.StreamConnects(), s.Polls)
		}
	})
}

// An event never cuts short a wait the daemon keeps: after a failed poll the next one waits for
// its backoff, whatever the stream announces meanwhile.
func TestStreamEventDoesNotCutABackoff(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	synctest.Test(t, func(t *testing.T) {
		m, stop := bubbleInbox(t, p, t.TempDir(), chattest.NewAnswerer(nil), func(c *Config) {
			streamConfig(c)
			c.RetryInitial, c.RetryMax = 20*time.Second, 20*time.Second
		})
		time.Sleep(time.Minute)
		p.FailNext(moleculetest.RouteActivity, 1, 500)
		p.Enqueue(moleculetest.CanvasMessage("first")) // its event polls, and the poll fails
		time.Sleep(time.Second)
		if m.Stats().PollErrors != 1 {
			t.Fatalf("poll errors %d, want the injected one", m.Stats().PollErrors)
		}
		p.Enqueue(moleculetest.CanvasMessage("second")) // an event during the backoff
		time.Sleep(5 * time.Second)
		if n := len(p.Notifies()); n != 0 {
			t.Fatalf("%d replies 5 s into a backoff of at least 10 s: an event cut it short", n)
		}
		time.Sleep(time.Minute)
		stop()
		if n := len(p.Notifies()); n != 2 {
			t.Fatalf("%d replies after the backoff, want 2", n)
		}
	})
}
