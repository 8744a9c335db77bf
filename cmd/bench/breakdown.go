package main

import (
	"fmt"
	"math"
	"time"

	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// A message's breakdown: where the wall time of one message through the daemon goes, from the
// mock model's timeline (mockmodel.Event) and the daemon's Server-Timing. The mock stamps what it
// sees on its side of the path, so on the websocket path a request "at the model" left codex half
// a round trip earlier, and the model's first byte reaches codex half a round trip later.

// msgSample is one message posted to a daemon: when the post started, its wall time and the
// turn's own time from Server-Timing (ms).
type msgSample struct {
	start  time.Time
	wall   time.Duration
	turnMS float64
}

// msgSteps is one message's breakdown, in ms from the post's start. connect and upgrade are NaN
// when the model request came on a connection opened before the message (the usual case on the
// websocket: one per child, opened at thread/start).
type msgSteps struct {
	wall, daemon       float64
	connect, upgrade   float64
	request, firstByte float64
	newConn            bool
}

// stepsOf finds s's model request on the timeline: the first request that arrived inside the
// post's window, the first byte answered to it, and the connection and upgrade it came on when
// they, too, fall inside the window. Steps of other connections in the window (a spare started
// meanwhile opens its own) are not the message's. A window without a request gives NaNs.
func stepsOf(events []mockmodel.Event, s msgSample) msgSteps {
	end := s.start.Add(s.wall)
	in := func(t time.Time) bool { return !t.Before(s.start) && !t.After(end) }
	st := msgSteps{wall: ms(s.wall), daemon: ms(s.wall) - s.turnMS, connect: math.NaN(), upgrade: math.NaN(),
		request: math.NaN(), firstByte: math.NaN()}
	since := func(t time.Time) float64 { return ms(t.Sub(s.start)) }
	var req mockmodel.Event
	for _, e := range events {
		if e.Kind == mockmodel.EventRequest && in(e.At) {
			req = e
			break
		}
	}
	if req.Request == 0 {
		return st
	}
	st.request = since(req.At)
	for _, e := range events {
		switch {
		case e.Kind == mockmodel.EventFirstByte && e.Request == req.Request && math.IsNaN(st.firstByte):
			st.firstByte = since(e.At)
		case e.Conn != req.Conn || req.Conn == 0 || !in(e.At):
		case e.Kind == mockmodel.EventConnect:
			st.connect, st.newConn = since(e.At), true
		case e.Kind == mockmodel.EventUpgrade:
			st.upgrade, st.newConn = since(e.At), true
		}
	}
	return st
}

// breakdownRows adds one row per step to comparison name: the median of the first messages
// against that of the warm ones, side by side, and a note with how many of each opened a
// connection of their own.
func (b *bench) breakdownRows(name, label string, first, warm []msgSteps) {
	step := func(metric string, f func(msgSteps) float64) {
		fm, wm := medianOf(first, f), medianOf(warm, f)
		b.addRow(name, label+": "+metric, "first", fm, "warm", wm, "first/warm", ratio(fm, wm))
	}
	step("wall ms (median)", func(s msgSteps) float64 { return s.wall })
	step("daemon part ms, wall − Server-Timing turn", func(s msgSteps) float64 { return s.daemon })
	step("ms to the request at the model", func(s msgSteps) float64 { return s.request })
	step("ms to the model's first byte", func(s msgSteps) float64 { return s.firstByte })
	step("ms from the model's first byte to the reply", func(s msgSteps) float64 { return s.wall - s.firstByte })
	count := func(xs []msgSteps) int {
		n := 0
		for _, s := range xs {
			if s.newConn {
				n++
			}
		}
		return n
	}
	b.addNote(name, label+": messages that opened a model connection",
		fmt.Sprintf("first %d of %d (connect at %s ms, upgrade at %s ms, medians), warm %d of %d",
			count(first), len(first), fmtFloat(medianOf(first, func(s msgSteps) float64 { return s.connect })),
			fmtFloat(medianOf(first, func(s msgSteps) float64 { return s.upgrade })), count(warm), len(warm)))
}

// medianOf is the median of f over xs, NaNs left out.
func medianOf(xs []msgSteps, f func(msgSteps) float64) float64 {
	var v []float64
	for _, s := range xs {
		if x := f(s); !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	return median(v)
}

// stepsOfAll breaks down every sample against one timeline.
func stepsOfAll(events []mockmodel.Event, samples []msgSample) []msgSteps {
	out := make([]msgSteps, 0, len(samples))
	for _, s := range samples {
		out = append(out, stepsOf(events, s))
	}
	return out
}
