package main

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

// eventKind is one kind of chaos the harness applies.
type eventKind int

const (
	evDaemonKill   eventKind = iota // SIGKILL the daemon's process group, restart it
	evChildKill                     // SIGKILL one codex child
	evFlakyStart                    // a fraction of polls and replies answer 502
	evFlakyStop                     // the platform is healthy again
	evPlatformHang                  // the next call of a route never answers
	evCursorGone                    // the next since_id poll answers 410
)

func (k eventKind) String() string {
	return [...]string{"daemon-kill", "child-kill", "flaky-start", "flaky-stop", "platform-hang", "cursor-gone"}[k]
}

// event is one scheduled chaos action, At after the start of the chaos phase.
type event struct {
	At    time.Duration
	Kind  eventKind
	Route moleculetest.Route // evPlatformHang
	// OnReply makes a daemon kill wait for the platform to accept a reply and kill at once:
	// it aims at the window between the accept and the daemon persisting it.
	OnReply bool
}

func (e event) String() string {
	s := fmt.Sprintf("%6.1fs %s", e.At.Seconds(), e.Kind)
	if e.Route != "" {
		s += " " + string(e.Route)
	}
	if e.OnReply {
		s += " (right after a reply is accepted)"
	}
	return s
}

// planConfig is what the schedule is made of.
type planConfig struct {
	Duration                                                          time.Duration
	DaemonKills, ChildKills, PlatformHangs, CursorGone, FlakyEpisodes int
}

// plan draws the chaos schedule from rng: every kind spread over its part of the phase in equal
// strata (so that kills do not bunch up), sorted by time. The same seed gives the same schedule.
func plan(cfg planConfig, rng *rand.Rand) []event {
	var evs []event
	// spread places n events in [from, to) of the phase, one in each of n equal strata.
	spread := func(n int, from, to float64, kind eventKind) {
		for i := range n {
			w := (to - from) / float64(n)
			at := from + w*(float64(i)+rng.Float64())
			evs = append(evs, event{At: time.Duration(at * float64(cfg.Duration)), Kind: kind})
		}
	}
	// Daemon kills stop early enough that the last daemon carries real load before the end.
	spread(cfg.DaemonKills, 0.1, 0.8, evDaemonKill)
	for i := range evs {
		evs[i].OnReply = rng.IntN(2) == 0
	}
	spread(cfg.ChildKills, 0.05, 0.95, evChildKill)
	// A hung call costs the daemon's request timeout (30 s): only in the first half, so the
	// settle phase does not wait on it for long.
	hangRoutes := []moleculetest.Route{moleculetest.RouteActivity, moleculetest.RouteNotify, moleculetest.RouteA2A}
	n := len(evs)
	spread(cfg.PlatformHangs, 0.05, 0.5, evPlatformHang)
	for i := n; i < len(evs); i++ {
		evs[i].Route = hangRoutes[rng.IntN(len(hangRoutes))]
	}
	spread(cfg.CursorGone, 0.1, 0.9, evCursorGone)
	for i := range cfg.FlakyEpisodes {
		w := 1.0 / float64(cfg.FlakyEpisodes)
		start := w*float64(i) + w*0.3*rng.Float64()
		length := w * (0.3 + 0.4*rng.Float64())
		evs = append(evs,
			event{At: time.Duration(start * float64(cfg.Duration)), Kind: evFlakyStart},
			event{At: time.Duration((start + length) * float64(cfg.Duration)), Kind: evFlakyStop})
	}
	slices.SortStableFunc(evs, func(a, b event) int { return cmp.Compare(a.At, b.At) })
	return evs
}
