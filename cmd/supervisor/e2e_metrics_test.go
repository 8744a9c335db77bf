//go:build linux

package main

// /metrics after real turns on real codex, read by parsing the exposition with expfmt.

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/local"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/health"
	"github.com/molecule-ai/codex-warm/internal/metrics/metricstest"
)

func scrapeMetrics(t *testing.T, addr, token string) metricstest.Families {
	t.Helper()
	f, err := metricstest.Scrape(&http.Client{Timeout: waitTimeout}, "http://"+addr+"/metrics", token)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Three turns on the local inbox (two chats) show in /metrics: turns by kind and outcome, a
// duration per turn, a first-message latency per chat, the chats' idle children, and no chat
// key anywhere in a label. The status document names the metrics address; /healthz and /readyz
// answer on it; a foreign Host gets 421.
func TestE2EMetricsLocalTurns(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true})
	d := e.start("--metrics-listen", "127.0.0.1:0")
	addr := d.ready.Daemon.MetricsListen
	if addr == "" || strings.HasSuffix(addr, ":0") {
		t.Fatalf("status document metrics_listen %q, want the bound address", addr)
	}
	if l := d.logsWith("metrics listening"); len(l) != 1 || l[0].str("addr") != addr {
		t.Errorf("metrics listening lines %v, want one with addr %s", l, addr)
	}
	c := newLocalClient(t, d)
	c.send("alpha", "hello")
	c.send("alpha", "again")
	c.send("beta", "hi")

	f := scrapeMetrics(t, addr, "")
	if v := f.MustValue(t, "codex_warm_turns_total", metricstest.Labels{"kind": "local", "outcome": "completed"}); v != 3 {
		t.Errorf("turns{local,completed} = %v, want 3", v)
	}
	if v := f.MustValue(t, "codex_warm_turns_total", nil); v != 3 {
		t.Errorf("turns in all = %v, want 3", v)
	}
	if n, _ := f.HistogramCount("codex_warm_turn_duration_seconds", metricstest.Labels{"kind": "local"}); n != 3 {
		t.Errorf("turn durations %d, want 3", n)
	}
	if n, _ := f.HistogramCount("codex_warm_first_message_latency_seconds", metricstest.Labels{"kind": "local"}); n != 2 {
		t.Errorf("first-message latencies %d, want 2 (alpha's first, beta's first)", n)
	}
	if v := f.MustValue(t, "codex_warm_children", metricstest.Labels{"state": "idle"}); v != 2 {
		t.Errorf("idle children %v, want 2", v)
	}
	if v := f.MustValue(t, "codex_warm_children", metricstest.Labels{"state": "busy"}); v != 0 {
		t.Errorf("busy children %v, want 0", v)
	}
	if spare, starting := f.MustValue(t, "codex_warm_children", metricstest.Labels{"state": "spare"}),
		f.MustValue(t, "codex_warm_children", metricstest.Labels{"state": "starting"}); spare+starting > 1 {
		t.Errorf("spare %v + starting %v children, want at most the one spare", spare, starting)
	}
	if v := f.MustValue(t, "codex_warm_queue_depth", nil); v != 0 {
		t.Errorf("queue depth %v", v)
	}
	if v := f.MustValue(t, "codex_warm_children_pss_bytes", nil); v <= 0 {
		t.Errorf("children PSS %v, want the children's memory", v)
	}
	// What grows on disk: both folders measured (at start, by the sampler), and the chat idle
	// the longest, with no chat key.
	d.waitUntil("the folder sizes sampled", func() bool {
		f := scrapeMetrics(t, addr, "")
		h, hok := f.Value("codex_warm_dir_bytes", metricstest.Labels{"dir": "codex_home"})
		s, sok := f.Value("codex_warm_dir_bytes", metricstest.Labels{"dir": "state"})
		return hok && sok && h > 0 && s > 0
	})
	if v, ok := f.Value("codex_warm_oldest_idle_chat_seconds", nil); !ok || v < 0 || v > 600 {
		t.Errorf("oldest idle chat %v s (%v), want the seconds since alpha's last turn", v, ok)
	}
	if v := f.MustValue(t, "go_goroutines", nil); v <= 0 {
		t.Errorf("go_goroutines %v", v)
	}
	for name, mf := range f {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v := lp.GetValue(); v == "alpha" || v == "beta" || strings.Contains(v, "hello") {
					t.Errorf("%s has label %s=%q: a chat key or text", name, lp.GetName(), v)
				}
			}
		}
	}

	var live map[string]string
	if code := getJSON(t, "http://"+addr+"/healthz", &live); code != http.StatusOK || live["status"] != "ok" {
		t.Errorf("/healthz: %d %v", code, live)
	}
	var rep health.Report
	if code := getJSON(t, "http://"+addr+"/readyz", &rep); code != http.StatusOK || !rep.Ready() || len(rep.Checks) != 6 {
		t.Errorf("/readyz: %d %+v", code, rep)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
	req.Host = "rebound.example:80"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var le local.ErrorReply
	_ = json.NewDecoder(resp.Body).Decode(&le)
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest || le.Rule != local.RuleHost {
		t.Errorf("foreign Host: HTTP %d %+v, want 421 rule host", resp.StatusCode, le)
	}
	d.stop(stopTimeout)
}

// Molecule turns show by chat kind (canvas and peer), with the inbox's delivery counters and
// poll latency; the metrics token (CODEX_WARM_METRICS_TOKEN) is required when set.
func TestE2EMetricsMolecule(t *testing.T) {
	t.Parallel()
	const token = "metrics-secret"
	e := newE2E(t, e2eConfig{Env: []string{"CODEX_WARM_METRICS_TOKEN=" + token}})
	d := e.start("--metrics-listen", "127.0.0.1:0")
	addr := d.ready.Daemon.MetricsListen
	e.plat.Enqueue(moleculetest.CanvasMessage("hello canvas"), moleculetest.PeerMessage("peer-1", "hello peer"))
	d.waitPlatform("both replies delivered", func() bool { return e.plat.Deliveries() >= 2 })
	d.waitUntil("the inbox counted both deliveries", func() bool { return d.bridgeStats().Delivered == 2 })

	if _, err := metricstest.Scrape(&http.Client{Timeout: waitTimeout}, "http://"+addr+"/metrics", ""); err == nil || !strings.Contains(err.Error(), "HTTP 401") {
		t.Errorf("scrape without the token: %v, want HTTP 401", err)
	}
	f := scrapeMetrics(t, addr, token)
	for _, kind := range []string{"canvas", "peer"} {
		if v := f.MustValue(t, "codex_warm_turns_total", metricstest.Labels{"kind": kind, "outcome": "completed"}); v != 1 {
			t.Errorf("turns{%s,completed} = %v, want 1", kind, v)
		}
		if n, _ := f.HistogramCount("codex_warm_first_message_latency_seconds", metricstest.Labels{"kind": kind}); n != 1 {
			t.Errorf("first-message latencies of %s: %d, want 1", kind, n)
		}
	}
	st := d.bridgeStats()
	for name, want := range map[string]int64{
		"codex_warm_molecule_received_total":          2,
		"codex_warm_molecule_delivered_total":         2,
		"codex_warm_molecule_delivery_failures_total": 0,
		"codex_warm_molecule_poison_rows_total":       st.Poison,
		"codex_warm_molecule_poll_errors_total":       st.PollErrors,
	} {
		if v := f.MustValue(t, name, nil); v != float64(want) {
			t.Errorf("%s = %v, want %d", name, v, want)
		}
	}
	if n, _ := f.HistogramCount("codex_warm_molecule_poll_duration_seconds", nil); n == 0 {
		t.Error("no poll durations")
	}
	var rep health.Report
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/readyz", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = json.NewDecoder(resp.Body).Decode(&rep)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !rep.Ready() {
		t.Errorf("/readyz with the token: %d %+v", resp.StatusCode, rep)
	}
	d.stop(stopTimeout)
}

// A --metrics-listen beyond loopback without a metrics token stops the daemon at start.
func TestE2EMetricsExposedWithoutTokenRefused(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true})
	d := e.launch("--metrics-listen", "0.0.0.0:0")
	d.waitFailed()
	if out := d.log(); !strings.Contains(out, "--metrics-listen") || !strings.Contains(out, local.ErrExposedWithoutToken.Error()) {
		t.Errorf("output does not say why:\n%s", out)
	}
}
