package metrics

import (
	"maps"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/molecule-ai/codex-warm/bridge/molecule"
	"github.com/molecule-ai/codex-warm/supervisor"
)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, labels, nil)
}

// childStates are the "state" label values of codex_warm_children, always all reported (a
// state with no child reads 0, so alerts on it see a value). Dead children are gone from the
// table.
var childStates = []supervisor.State{supervisor.StateStarting, supervisor.StateSpare, supervisor.StateIdle,
	supervisor.StateBusy, supervisor.StateRetiring}

var (
	descQueue         = desc("queue_depth", "Messages waiting in the chats' queues (not yet running).")
	descSlotWaiters   = desc("slot_waiters", "Chats waiting for a free codex child slot.")
	descChildren      = desc("children", "Live codex children by state; with --threads-per-child above 1, the chats' threads in them.", "state")
	descProcesses     = desc("child_processes", "Live codex child processes (fewer than codex_warm_children when --threads-per-child is above 1).")
	descPerChild      = desc("threads_per_child", "Chats' threads one codex child may hold (--threads-per-child).")
	descChildrenMax   = desc("children_max", "Hard cap on live codex children (--max-children).")
	descRetirements   = desc("child_retirements_total", "Codex children retired, by reason (idle, evicted, memory, max_age, max_turns, reset, shutdown, start_failed, protocol_error, or a watchdog name).", "reason")
	descRestarts      = desc("child_restarts_total", "Codex children started for a chat whose previous child a watchdog or a failure ended.")
	descCrashBackoffs = desc("crash_backoffs_total", "Codex child crashes that started a restart backoff (chats' children and spares).")
	descPSS           = desc("children_pss_bytes", "Sum of the codex children's proportional set size (what they cost together).")
	descUSS           = desc("children_uss_bytes", "Sum of the codex children's private memory (what retiring them all gives back).")
	descBudget        = desc("memory_budget_bytes", "Bound on the children's summed PSS (--memory-budget); 0: none.")
	descCharged       = desc("memory_charged_bytes", "What the memory budget counts as used: measured PSS plus the estimate for children not measured yet.")
	descEstimate      = desc("child_estimate_bytes", "What one more codex child is expected to cost.")
	descOverload      = desc("overload_retries_total", "Requests to codex children that codex refused as overloaded and that were sent again.")
	descCompactions   = desc("thread_compactions_total", "Threads compacted by the long-thread policy (--compact-after-turns, --compact-above), by outcome.", "outcome")
	descStoreErrors   = desc("thread_store_errors_total", "Failed writes of thread ids to sessions.json.")
	descModelUp       = desc("model_reachable", "1 while the model service can be reached as the turns find it; 0 from a turn that could not reach it until one gets through.")
	descModelOutages  = desc("model_outages_total", "Times the model service became unreachable.")
)

// poolCollector reads the pool's table at scrape time.
type poolCollector struct {
	status func() supervisor.Snapshot
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descQueue, descSlotWaiters, descChildren, descChildrenMax, descRetirements,
		descProcesses, descPerChild, descRestarts, descCrashBackoffs, descPSS, descUSS, descBudget, descCharged, descEstimate, descOverload, descCompactions, descStoreErrors, descModelUp, descModelOutages} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	snap := c.status()
	t := snap.Totals
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge(descQueue, float64(t.Queued))
	gauge(descSlotWaiters, float64(t.WaitingForSlot))
	byState := make(map[supervisor.State]int, len(childStates))
	for _, cs := range snap.Children {
		byState[cs.State]++
	}
	for _, st := range childStates {
		gauge(descChildren, float64(byState[st]), string(st))
	}
	gauge(descChildrenMax, float64(t.Cap))
	gauge(descProcesses, float64(t.Children))
	gauge(descPerChild, float64(t.ThreadsPerChild))
	// Reasons are the supervisor's constants: a small fixed set.
	for _, reason := range slices.Sorted(maps.Keys(t.Retired)) {
		counter(descRetirements, float64(t.Retired[reason]), reason)
	}
	counter(descRestarts, float64(t.Restarts))
	counter(descCrashBackoffs, float64(t.CrashBackoffs))
	gauge(descPSS, float64(t.PSSBytes))
	gauge(descUSS, float64(t.USSBytes))
	gauge(descBudget, float64(t.MemoryBudgetBytes))
	gauge(descCharged, float64(t.ChargedBytes))
	gauge(descEstimate, float64(t.ChildEstimateBytes))
	counter(descOverload, float64(t.OverloadRetries))
	counter(descCompactions, float64(t.Compactions), "ok")
	counter(descCompactions, float64(t.CompactionFailures), "failed")
	counter(descStoreErrors, float64(t.StoreErrors))
	up := 0.0
	if !snap.Model.Unreachable {
		up = 1
	}
	gauge(descModelUp, up)
	counter(descModelOutages, float64(snap.Model.Outages))
}

// bridgeCounters are the Molecule inbox's monotonic counters, by metric name.
var bridgeCounters = []struct {
	desc *prometheus.Desc
	get  func(molecule.Stats) int64
}{
	{desc("molecule_received_total", "Platform messages accepted for answering."), func(s molecule.Stats) int64 { return s.Received }},
	{desc("molecule_delivered_total", "Replies the platform accepted."), func(s molecule.Stats) int64 { return s.Delivered }},
	{desc("molecule_delivery_retries_total", "Failed reply deliveries that were retried."), func(s molecule.Stats) int64 { return s.DeliveryRetries }},
	{desc("molecule_delivery_failures_total", "Replies given up on because the platform refused them for good."), func(s molecule.Stats) int64 { return s.DeliveryFailed }},
	{desc("molecule_delivery_unknown_total", "Replies given up on after two sends whose answers were lost (a third copy could be a third bubble)."), func(s molecule.Stats) int64 { return s.DeliveryUnknown }},
	{desc("molecule_peer_capped_total", "Peer messages not answered: automatic exchanges in a row with that peer reached --peer-exchanges."), func(s molecule.Stats) int64 { return s.PeerCapped }},
	{desc("molecule_files_sent_total", "Files the agent sent to the chat (send_file) that the platform took with a reply."), func(s molecule.Stats) int64 { return s.FilesSent }},
	{desc("molecule_files_refused_total", "Files the agent named with send_file that may not leave (outside the chat's folder, a link, a credential inside, over a limit)."), func(s molecule.Stats) int64 { return s.FilesRefused }},
	{desc("molecule_poison_rows_total", "Activity rows that cannot be answered and were moved past."), func(s molecule.Stats) int64 { return s.Poison }},
	{desc("molecule_duplicates_total", "Activity rows seen again and skipped."), func(s molecule.Stats) int64 { return s.Duplicates }},
	{desc("molecule_busy_retries_total", "Messages the pool answered busy that were tried again later."), func(s molecule.Stats) int64 { return s.BusyRetries }},
	{desc("molecule_unreachable_retries_total", "Tries of messages put off because the model service could not be reached."), func(s molecule.Stats) int64 { return s.UnreachableRetries }},
	{desc("molecule_parked_total", "Messages parked until the account's usage limit resets (each chat told once)."), func(s molecule.Stats) int64 { return s.Parked }},
	{desc("molecule_parked_too_long_total", "Messages answered with the usage limit because its reset was past --park-limit."), func(s molecule.Stats) int64 { return s.ParkedTooLong }},
	{desc("molecule_commands_total", "Chat commands answered (/stop, /new, /status, /help)."), func(s molecule.Stats) int64 { return s.Commands }},
	{desc("molecule_codex_failures_total", "Answers that report a failure instead of codex's answer."), func(s molecule.Stats) int64 { return s.CodexFailures }},
	{desc("molecule_poll_errors_total", "Failed activity polls."), func(s molecule.Stats) int64 { return s.PollErrors }},
	{desc("molecule_heartbeat_errors_total", "Failed heartbeats."), func(s molecule.Stats) int64 { return s.HeartbeatErrors }},
	{desc("molecule_persist_errors_total", "Failed writes of the inbox state file."), func(s molecule.Stats) int64 { return s.PersistErrors }},
	{desc("molecule_rate_limited_total", "Platform answers 429 (rate limit); every platform call waited for their Retry-After."), func(s molecule.Stats) int64 { return s.RateLimited }},
	{desc("molecule_stream_connects_total", "Connects tried to the workspace's event stream."), func(s molecule.Stats) int64 { return s.Stream.Connects }},
	{desc("molecule_stream_wakeups_total", "Events of the stream that woke the activity poll (a message may have landed)."), func(s molecule.Stats) int64 { return s.Stream.Wakeups }},
	{desc("molecule_tool_chips_sent_total", "Tool chips (agent_log rows of canvas turns) the platform took."), func(s molecule.Stats) int64 { return s.Chips.Sent }},
	{desc("molecule_tool_chips_coalesced_total", "Tool calls folded into a later chip (at most one chip a second per chat)."), func(s molecule.Stats) int64 { return s.Chips.Coalesced }},
	{desc("molecule_tool_chips_dropped_total", "Tool chips not sent: the rate budget was low, or a burst outran the queue."), func(s molecule.Stats) int64 { return s.Chips.Dropped }},
	{desc("molecule_tool_chips_failed_total", "Tool chips the platform did not take."), func(s molecule.Stats) int64 { return s.Chips.Failed }},
	{desc("molecule_optional_dropped_total", "Optional requests (stream reconnects beyond the first, tool chips) held back for the rate budget."), func(s molecule.Stats) int64 { return s.Budget.OptionalDropped }},
}

// streamStates are the state label values of codex_warm_molecule_stream, always all reported.
var streamStates = []molecule.StreamState{molecule.StreamOff, molecule.StreamConnecting, molecule.StreamConnected,
	molecule.StreamReconnecting, molecule.StreamAbsent}

var (
	descUnacked    = desc("molecule_unacked_rows", "Received rows not yet behind the durable inbox position.")
	descPending    = desc("molecule_pending_replies", "Replies waiting for delivery.")
	descRunning    = desc("molecule_in_flight", "Platform messages being answered now.")
	descPolls      = desc("molecule_polls_total", "Activity polls, by why they ran: interval (the stream down, absent or off), safety (the stream up), event, catch_up (after a connect), retry, more (reading on).", "cause")
	descStream     = desc("molecule_stream", "The event stream's state: 1 for the current one.", "state")
	descEvents     = desc("molecule_stream_events_total", "Events the stream brought, by type.", "type")
	descRateBudget = desc("molecule_rate_budget_remaining", "Requests left in the platform's rate window as its last answer said (-1: unlimited or not known yet).")
)

// bridgeCollector reads the Molecule inbox's counters at scrape time.
var (
	descFilesSent    = desc("local_files_sent_total", "Files the agents sent with the local inbox's replies (send_file).")
	descFilesRefused = desc("local_files_refused_total", "Files the agents named with send_file on the local inbox that may not leave.")
)

// filesCollector reports the local inbox's file counts.
type filesCollector struct {
	files func() (sent, refused int64)
}

func (c *filesCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descFilesSent
	ch <- descFilesRefused
}

func (c *filesCollector) Collect(ch chan<- prometheus.Metric) {
	sent, refused := c.files()
	ch <- prometheus.MustNewConstMetric(descFilesSent, prometheus.CounterValue, float64(sent))
	ch <- prometheus.MustNewConstMetric(descFilesRefused, prometheus.CounterValue, float64(refused))
}

type bridgeCollector struct {
	stats func() molecule.Stats
}

func (c *bridgeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, b := range bridgeCounters {
		ch <- b.desc
	}
	ch <- descUnacked
	ch <- descPending
	ch <- descRunning
	ch <- descPolls
	ch <- descStream
	ch <- descEvents
	ch <- descRateBudget
}

func (c *bridgeCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	for _, b := range bridgeCounters {
		ch <- prometheus.MustNewConstMetric(b.desc, prometheus.CounterValue, float64(b.get(s)))
	}
	ch <- prometheus.MustNewConstMetric(descUnacked, prometheus.GaugeValue, float64(s.Unacked))
	ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(s.PendingReplies))
	ch <- prometheus.MustNewConstMetric(descRunning, prometheus.GaugeValue, float64(s.InFlight))
	for cause, n := range s.Polls {
		ch <- prometheus.MustNewConstMetric(descPolls, prometheus.CounterValue, float64(n), cause)
	}
	for _, st := range streamStates {
		v := 0.0
		if s.Stream.State == st {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descStream, prometheus.GaugeValue, v, string(st))
	}
	for typ, n := range s.Stream.Events {
		ch <- prometheus.MustNewConstMetric(descEvents, prometheus.CounterValue, float64(n), typ)
	}
	remaining := float64(s.Budget.Remaining)
	if s.Budget.Limit <= 0 {
		remaining = -1
	}
	ch <- prometheus.MustNewConstMetric(descRateBudget, prometheus.GaugeValue, remaining)
}
