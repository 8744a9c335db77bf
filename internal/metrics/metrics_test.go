package metrics

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/molecule"
	"github.com/molecule-ai/codex-warm/internal/metrics/metricstest"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// fakeSource stands in for the supervisor and the Molecule inbox.
type fakeSource struct {
	mu   sync.Mutex
	snap supervisor.Snapshot
	st   molecule.Stats
}

func (f *fakeSource) status() supervisor.Snapshot { f.mu.Lock(); defer f.mu.Unlock(); return f.snap }
func (f *fakeSource) stats() molecule.Stats       { f.mu.Lock(); defer f.mu.Unlock(); return f.st }

func scrape(t *testing.T, m *Metrics) metricstest.Families {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	f, err := metricstest.Scrape(srv.Client(), srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// A scrape reports what the pool's table and the inbox's counters say at that moment, every
// child state (0 included), retirements by reason, and changes when the source does.
func TestCollectorReadsSourceAtScrape(t *testing.T) {
	src := &fakeSource{}
	src.snap = supervisor.Snapshot{
		Children: []supervisor.ChildStatus{
			{ChatKey: "canvas:ws", State: supervisor.StateBusy}, {ChatKey: "peer:x", State: supervisor.StateIdle},
			{ChatKey: "local-a", State: supervisor.StateIdle}, {State: supervisor.StateSpare},
		},
		Totals: supervisor.Totals{Queued: 3, WaitingForSlot: 1, Cap: 8, Retired: map[string]int{"idle": 4, supervisor.WatchdogTurn: 1},
			Restarts: 2, CrashBackoffs: 5, PSSBytes: 100 << 20, USSBytes: 40 << 20, MemoryBudgetBytes: 1 << 30,
			ChargedBytes: 150 << 20, ChildEstimateBytes: 53 << 20, OverloadRetries: 6, StoreErrors: 7, Compactions: 3, CompactionFailures: 1,
			Children: 2, ThreadsPerChild: 4},
	}
	src.st = molecule.Stats{Received: 10, Delivered: 9, DeliveryRetries: 2, DeliveryFailed: 1, Poison: 3, Duplicates: 4,
		BusyRetries: 5, Commands: 6, PollErrors: 7, Unacked: 2, PendingReplies: 1, InFlight: 1}
	m := New(Config{Status: src.status, Bridge: src.stats})
	f := scrape(t, m)

	for name, want := range map[string]float64{
		"codex_warm_queue_depth": 3, "codex_warm_slot_waiters": 1, "codex_warm_children_max": 8,
		"codex_warm_child_restarts_total": 2, "codex_warm_crash_backoffs_total": 5,
		"codex_warm_children_pss_bytes": 100 << 20, "codex_warm_children_uss_bytes": 40 << 20,
		"codex_warm_memory_budget_bytes": 1 << 30, "codex_warm_memory_charged_bytes": 150 << 20,
		"codex_warm_child_estimate_bytes": 53 << 20, "codex_warm_overload_retries_total": 6,
		"codex_warm_thread_store_errors_total": 7, "codex_warm_child_processes": 2, "codex_warm_threads_per_child": 4,
		"codex_warm_molecule_received_total": 10, "codex_warm_molecule_delivered_total": 9,
		"codex_warm_molecule_delivery_retries_total": 2, "codex_warm_molecule_delivery_failures_total": 1,
		"codex_warm_molecule_poison_rows_total": 3, "codex_warm_molecule_duplicates_total": 4,
		"codex_warm_molecule_busy_retries_total": 5, "codex_warm_molecule_commands_total": 6,
		"codex_warm_molecule_poll_errors_total": 7, "codex_warm_molecule_unacked_rows": 2,
		"codex_warm_molecule_pending_replies": 1, "codex_warm_molecule_in_flight": 1,
	} {
		if got := f.MustValue(t, name, nil); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	for state, want := range map[string]float64{"starting": 0, "spare": 1, "idle": 2, "busy": 1, "retiring": 0} {
		if got := f.MustValue(t, "codex_warm_children", metricstest.Labels{"state": state}); got != want {
			t.Errorf("children{state=%s} = %v, want %v", state, got, want)
		}
	}
	if got := f.MustValue(t, "codex_warm_child_retirements_total", metricstest.Labels{"reason": "turn_deadline"}); got != 1 {
		t.Errorf("retirements{turn_deadline} = %v", got)
	}
	for outcome, want := range map[string]float64{"ok": 3, "failed": 1} {
		if got := f.MustValue(t, "codex_warm_thread_compactions_total", metricstest.Labels{"outcome": outcome}); got != want {
			t.Errorf("thread_compactions_total{%s} = %v, want %v", outcome, got, want)
		}
	}
	// The Go and process collectors are registered (daemon goroutines and heap).
	for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_resident_memory_bytes"} {
		if _, ok := f.Value(name, nil); !ok {
			t.Errorf("no %s", name)
		}
	}

	src.mu.Lock()
	src.snap.Totals.Queued = 0
	src.snap.Children = nil
	src.st.Delivered = 12
	src.mu.Unlock()
	f = scrape(t, m)
	if q, d, busy := f.MustValue(t, "codex_warm_queue_depth", nil), f.MustValue(t, "codex_warm_molecule_delivered_total", nil),
		f.MustValue(t, "codex_warm_children", metricstest.Labels{"state": "busy"}); q != 0 || d != 12 || busy != 0 {
		t.Errorf("after the change: queue %v delivered %v busy %v", q, d, busy)
	}
}

// Without a Molecule inbox its metrics are absent, not zero.
func TestNoBridgeNoMoleculeMetrics(t *testing.T) {
	m := New(Config{Status: (&fakeSource{}).status, NoRuntime: true})
	f := scrape(t, m)
	for name := range f {
		if strings.HasPrefix(name, "codex_warm_molecule_") {
			t.Errorf("molecule metric %s without a Molecule inbox", name)
		}
	}
	if _, ok := f.Value("codex_warm_children", metricstest.Labels{"state": "idle"}); !ok {
		t.Error("no pool metrics")
	}
}

// ObserveTurn counts by chat kind and outcome, times only turns that ran, and the first-message
// latency only of messages that started a child; ObservePoll feeds the poll histogram.
func TestObserveTurnAndPoll(t *testing.T) {
	m := New(Config{Status: (&fakeSource{}).status, Bridge: (&fakeSource{}).stats, NoRuntime: true})
	done := func(key string, d time.Duration, started bool) supervisor.TurnEvent {
		return supervisor.TurnEvent{ChatKey: key, Reply: supervisor.Reply{TurnID: "t", Status: "completed", Duration: d},
			Latency: d + time.Second, StartedChild: started}
	}
	m.ObserveTurn(done("canvas:ws-1", 2*time.Second, true))
	m.ObserveTurn(done("canvas:ws-1", 3*time.Second, false))
	m.ObserveTurn(done("peer:abc", time.Second, true))
	m.ObserveTurn(supervisor.TurnEvent{ChatKey: "mine", Reply: supervisor.Reply{TurnID: "t", Status: "failed", Duration: time.Second}})
	m.ObserveTurn(supervisor.TurnEvent{ChatKey: "mine", Err: fmt.Errorf("chat mine: %w", supervisor.ErrQueueFull)})
	m.ObserveTurn(supervisor.TurnEvent{ChatKey: "mine", Err: &supervisor.WatchdogError{ChatKey: "mine", Watchdog: supervisor.WatchdogPostTool, Err: errors.New("quiet")}})
	m.ObservePoll(20*time.Millisecond, nil)
	m.ObservePoll(time.Second, errors.New("HTTP 502"))
	f := scrape(t, m)

	for _, tc := range []struct {
		kind, outcome string
		want          float64
	}{{"canvas", "completed", 2}, {"peer", "completed", 1}, {"local", "failed", 1}, {"local", "busy", 1}, {"local", "watchdog_post_tool_quiet", 1}} {
		if got := f.MustValue(t, "codex_warm_turns_total", metricstest.Labels{"kind": tc.kind, "outcome": tc.outcome}); got != tc.want {
			t.Errorf("turns{%s,%s} = %v, want %v", tc.kind, tc.outcome, got, tc.want)
		}
	}
	if got := f.MustValue(t, "codex_warm_turns_total", nil); got != 6 {
		t.Errorf("turns in all %v, want 6", got)
	}
	kinds := f.LabelValues("codex_warm_turns_total", "kind")
	slices.Sort(kinds)
	if kinds = slices.Compact(kinds); !slices.Equal(kinds, []string{"canvas", "local", "peer"}) {
		t.Errorf("kind labels %v: a chat key leaked into a label?", kinds)
	}
	if n, _ := f.HistogramCount("codex_warm_turn_duration_seconds", metricstest.Labels{"kind": "canvas"}); n != 2 {
		t.Errorf("canvas turn durations %d, want 2", n)
	}
	if s := f.HistogramSum("codex_warm_turn_duration_seconds", metricstest.Labels{"kind": "canvas"}); s != 5 {
		t.Errorf("canvas turn duration sum %v, want 5", s)
	}
	if n, _ := f.HistogramCount("codex_warm_turn_duration_seconds", nil); n != 4 {
		t.Errorf("turn durations %d, want 4 (the busy and watchdog messages ran no turn)", n)
	}
	if n, _ := f.HistogramCount("codex_warm_first_message_latency_seconds", nil); n != 2 {
		t.Errorf("first-message latencies %d, want 2", n)
	}
	if s := f.HistogramSum("codex_warm_first_message_latency_seconds", metricstest.Labels{"kind": "canvas"}); s != 3 {
		t.Errorf("canvas first-message latency sum %v, want 3", s)
	}
	if n, _ := f.HistogramCount("codex_warm_molecule_poll_duration_seconds", nil); n != 2 {
		t.Errorf("polls %d, want 2", n)
	}
}

func TestChatKind(t *testing.T) {
	for key, want := range map[string]string{"canvas:ws-1": KindCanvas, "peer:abc": KindPeer, "local-x": KindLocal, "canvasx": KindLocal, "": KindLocal} {
		if got := ChatKind(key); got != want {
			t.Errorf("ChatKind(%q) = %q, want %q", key, got, want)
		}
	}
}

// Two registries side by side: nothing is registered globally.
func TestOwnRegistry(t *testing.T) {
	a := New(Config{Status: (&fakeSource{}).status})
	b := New(Config{Status: (&fakeSource{}).status})
	a.ObserveTurn(supervisor.TurnEvent{ChatKey: "x", Reply: supervisor.Reply{Status: "completed"}})
	if _, ok := scrape(t, b).Value("codex_warm_turns_total", nil); ok {
		t.Error("a turn observed by one registry shows in another")
	}
	if v := scrape(t, a).MustValue(t, "codex_warm_turns_total", nil); v != 1 {
		t.Errorf("turns %v", v)
	}
}
