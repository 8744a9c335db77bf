// Package metrics exposes the daemon's Prometheus metrics. Gauges and running totals the pool and
// the Molecule inbox already keep (supervisor.Totals, molecule.Stats) are read at scrape time by a
// collector, so there is one source of truth; what needs a distribution (turn duration,
// first-message latency, poll latency) is recorded from the supervisor's and the inbox's event
// hooks. Labels come from small fixed sets: no chat key, thread id or text is ever a label.
package metrics

import (
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/bridge/chat"
	"github.com/molecule-ai/codex-warm/bridge/molecule"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// Namespace prefixes every metric of the daemon.
const Namespace = "codex_warm"

// Chat kinds, the "kind" label: from the chat key's prefix.
const (
	KindCanvas = "canvas"
	KindPeer   = "peer"
	KindLocal  = "local"
)

// ChatKind is the kind of a chat key: "canvas:" and "peer:" keys come from the Molecule platform,
// every other key from the local inbox.
func ChatKind(key string) string {
	switch {
	case strings.HasPrefix(key, "canvas:"):
		return KindCanvas
	case strings.HasPrefix(key, "peer:"):
		return KindPeer
	}
	return KindLocal
}

// Buckets of the histograms, in seconds. Turns run from about a second (a short answer) to the
// 600 s turn deadline; a first message adds a child start (~80 ms spawn and initialize, more for
// a thread resume) or takes a spare (milliseconds). A poll is one small GET, tens of
// milliseconds on a healthy platform, up to the 30 s request timeout.
var (
	turnBuckets    = []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
	latencyBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
	pollBuckets    = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
)

// Config configures Metrics.
type Config struct {
	// Status reads the pool (supervisor.Supervisor.Status); required.
	Status func() supervisor.Snapshot
	// Bridge reads the Molecule inbox's counters (molecule.Inbox.Stats); nil without one, and
	// its metrics are then left out.
	Bridge func() molecule.Stats
	// Files reads the files the local inbox's replies carried and refused (local.Inbox.Files);
	// nil leaves their metrics out (the Molecule inbox counts them in Bridge).
	Files func() (sent, refused int64)
	// Limits reads the account's usage limits (supervisor.Supervisor.Limits); nil leaves their
	// metrics out.
	Limits func() supervisor.LimitStatus
	// DirSizes reads the folder sizes a DirSampler measured; nil leaves codex_warm_dir_bytes out.
	DirSizes func() map[string]int64
	// OldestIdle reads the oldest idle chat's idle time (supervisor.Supervisor.OldestIdle); nil
	// leaves its metric out.
	OldestIdle func() (time.Duration, bool)
	// Retention reads the archive log's counts (retention.go); nil leaves them out.
	Retention func() RetentionCounts
	// Logger gets scrape errors; nil means none.
	Logger *zap.Logger
	// NoRuntime leaves out the Go and process collectors (unit tests compare exact outputs).
	NoRuntime bool
}

// Metrics is the daemon's metric registry: its own, never the global default one.
type Metrics struct {
	reg          *prometheus.Registry
	log          *zap.Logger
	turns        *prometheus.CounterVec
	turnDuration *prometheus.HistogramVec
	firstLatency *prometheus.HistogramVec
	pollDuration prometheus.Histogram
	refreshes    *prometheus.CounterVec
	loginOwner   *prometheus.GaugeVec
	tokens       *prometheus.CounterVec
	reloads      *prometheus.CounterVec
	commands     *prometheus.CounterVec // commands.go
}

// New builds the registry.
func New(cfg Config) *Metrics {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		log: cfg.Logger.Named("metrics"),
		turns: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "turns_total",
			Help: "Messages submitted to the pool, by chat kind and outcome (completed, failed, interrupted, stopped, superseded, busy, crash_loop, not_logged_in, shutting_down, model_unreachable, usage_limit, watchdog_<name>, error)."},
			[]string{"kind", "outcome"}),
		turnDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "turn_duration_seconds",
			Help: "Duration of codex turns that ran (turn/start to turn/completed), by chat kind.", Buckets: turnBuckets},
			[]string{"kind"}),
		firstLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "first_message_latency_seconds",
			Help: "Wait from submit to reply of messages that started a codex child for their chat or took a spare, by chat kind.", Buckets: latencyBuckets},
			[]string{"kind"}),
	}
	m.refreshes = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "chatgpt_token_refreshes_total",
		Help: "Refreshes of the ChatGPT login the daemon holds for its children, by outcome (refreshed, adopted from auth.json or the platform, rejected: the login is gone, failed: no usable answer, not_renewed: the platform still held a refused token)."},
		[]string{"outcome"})
	m.loginOwner = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "chatgpt_login_owner",
		Help: "1 for who renews codex's ChatGPT login: platform (the daemon only reads it), daemon (it refreshes it for every child), child (each codex child holds its own)."},
		[]string{"owner"})
	m.tokens = newTokens()
	m.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "reloads_total",
		Help: "Reloads of the daemon in place (SIGHUP, supervisor reload), by outcome (ok: counted by the new image; refused: the new binary failed its preflight or the daemon could not quiesce; failed: the exec failed and the old image serves on). Counts since the image started, plus ok for the reload that started it."},
		[]string{"outcome"})
	m.commands = newCommands()
	m.reg.MustRegister(m.turns, m.turnDuration, m.firstLatency, m.refreshes, m.loginOwner, m.tokens, m.reloads, m.commands,
		&poolCollector{status: cfg.Status})
	if cfg.DirSizes != nil || cfg.OldestIdle != nil {
		m.reg.MustRegister(&growthCollector{sizes: cfg.DirSizes, oldestIdle: cfg.OldestIdle})
	}
	if cfg.Retention != nil {
		m.reg.MustRegister(&retentionCollector{read: cfg.Retention})
	}
	if cfg.Limits != nil {
		m.reg.MustRegister(&limitsCollector{limits: cfg.Limits})
	}
	if cfg.Files != nil {
		m.reg.MustRegister(&filesCollector{files: cfg.Files})
	}
	if cfg.Bridge != nil {
		m.pollDuration = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "molecule_poll_duration_seconds",
			Help: "Duration of Molecule activity polls, failed ones included.", Buckets: pollBuckets})
		m.reg.MustRegister(m.pollDuration, &bridgeCollector{stats: cfg.Bridge})
	}
	if !cfg.NoRuntime {
		m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return m
}

// ObserveTokenRefresh counts one refresh of the daemon-held ChatGPT login by its outcome; it is
// codexauth's Config.OnRefresh.
func (m *Metrics) ObserveTokenRefresh(outcome string) {
	m.refreshes.WithLabelValues(outcome).Inc()
}

// SetLoginOwner records who renews the ChatGPT login (codexauth.Owner*).
func (m *Metrics) SetLoginOwner(owner string) {
	m.loginOwner.Reset()
	m.loginOwner.WithLabelValues(owner).Set(1)
}

// ObserveReload counts one reload by its outcome.
func (m *Metrics) ObserveReload(outcome string) {
	m.reloads.WithLabelValues(outcome).Inc()
}

// ObserveTurn records one Submit call; it is the supervisor's Config.OnTurn.
func (m *Metrics) ObserveTurn(e supervisor.TurnEvent) {
	kind := ChatKind(e.ChatKey)
	m.turns.WithLabelValues(kind, chat.OutcomeLabel(e.Reply, e.Err)).Inc()
	if e.Reply.TurnID != "" {
		m.turnDuration.WithLabelValues(kind).Observe(e.Reply.Duration.Seconds())
	}
	m.observeTokens(kind, e.Reply)
	if e.StartedChild {
		m.firstLatency.WithLabelValues(kind).Observe(e.Latency.Seconds())
	}
}

// ObservePoll records one Molecule activity poll; it is the inbox's MoleculeConfig.OnPoll. Poll
// errors are counted by the inbox itself (codex_warm_molecule_poll_errors_total).
func (m *Metrics) ObservePoll(d time.Duration, _ error) {
	if m.pollDuration != nil {
		m.pollDuration.Observe(d.Seconds())
	}
}

// Handler serves the registry in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog:      zap.NewStdLog(m.log),
		ErrorHandling: promhttp.ContinueOnError,
		Registry:      m.reg, // promhttp_metric_handler_errors_total
	})
}

// Gatherer is the registry, for tests and in-process readers.
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.reg }
