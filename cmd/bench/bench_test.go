package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/internal/childproc"
	"github.com/molecule-ai/codex-warm/internal/exectest"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestMedianAndPercentile(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		p    float64
		want float64
	}{
		{[]float64{3, 1, 2}, 50, 2},
		{[]float64{4, 1, 3, 2}, 50, 2.5},
		{[]float64{7}, 50, 7},
		{[]float64{7}, 99, 7},
		{[]float64{1, 2, 3, 4, 5}, 0, 1},
		{[]float64{1, 2, 3, 4, 5}, 100, 5},
		{[]float64{1, 2, 3, 4, 5}, 25, 2},
		// numpy.percentile(range(1, 101), 99) == 99.01
		{seq(1, 100), 99, 99.01},
		{seq(1, 100), 50, 50.5},
	} {
		if got := percentile(tc.xs, tc.p); !near(got, tc.want) {
			t.Errorf("percentile(%v, %v) = %v, want %v", short(tc.xs), tc.p, got, tc.want)
		}
	}
	if got := median([]float64{5, 1, 100, 2, 3}); got != 3 {
		t.Errorf("median = %v, want 3 (an outlier must not move it)", got)
	}
	for _, p := range []float64{-1, 101, math.NaN()} {
		if got := percentile([]float64{1}, p); !math.IsNaN(got) {
			t.Errorf("percentile(p=%v) = %v, want NaN", p, got)
		}
	}
	if !math.IsNaN(median(nil)) || !math.IsNaN(mean(nil)) {
		t.Error("median/mean of nothing must be NaN")
	}
	xs := []float64{3, 1, 2}
	median(xs)
	if !slices.Equal(xs, []float64{3, 1, 2}) {
		t.Errorf("median sorted its input in place: %v", xs)
	}
	if got := mean([]float64{1, 2, 6}); got != 3 {
		t.Errorf("mean = %v, want 3", got)
	}
}

func TestMedianCI(t *testing.T) {
	xs := seq(1, 100)
	lo, hi := medianCI(xs)
	// n=100: ranks 50 ± 9.8 → 40 and 61.
	if lo != 40 || hi != 61 {
		t.Errorf("medianCI(1..100) = [%v, %v], want [40, 61]", lo, hi)
	}
	if m := median(xs); lo > m || hi < m {
		t.Errorf("interval [%v, %v] does not contain the median %v", lo, hi, m)
	}
	if lo, hi := medianCI([]float64{1, 2, 3}); !math.IsNaN(lo) || !math.IsNaN(hi) {
		t.Errorf("medianCI of 3 samples = [%v, %v], want NaN", lo, hi)
	}
	lo, hi = medianCI(seq(1, 6))
	if lo < 1 || hi > 6 || lo > hi {
		t.Errorf("medianCI(1..6) = [%v, %v], out of range", lo, hi)
	}
}

func TestRatioAndVerdict(t *testing.T) {
	if got := ratio(10, 4); got != 2.5 {
		t.Errorf("ratio = %v", got)
	}
	for _, tc := range [][2]float64{{1, 0}, {1, -1}, {math.NaN(), 1}, {1, math.NaN()}} {
		if got := ratio(tc[0], tc[1]); !math.IsNaN(got) {
			t.Errorf("ratio(%v, %v) = %v, want NaN", tc[0], tc[1], got)
		}
	}
	for _, tc := range []struct {
		diff, bare  float64
		wantAllowed float64
		wantOK      bool
	}{
		{1.9, 10, 2, true},   // absolute part wins for short turns
		{2.1, 10, 2, false},  //
		{4.9, 100, 5, true},  // 5% wins for long turns
		{5.1, 100, 5, false}, //
		{-3, 50, 2.5, true},  // faster than bare is within target
		{2.4, 40, 2, false},  // 5% of 40 is 2: max(2, 2)
		{2.0, 40, 2, true},   // the limit itself passes
		{0, math.NaN(), 0, false},
	} {
		allowed, ok := overheadVerdict(tc.diff, tc.bare, 2, 5)
		if ok != tc.wantOK || (!math.IsNaN(tc.bare) && !near(allowed, tc.wantAllowed)) {
			t.Errorf("overheadVerdict(%v, %v) = %v, %v; want %v, %v", tc.diff, tc.bare, allowed, ok, tc.wantAllowed, tc.wantOK)
		}
	}
	if got := confidence(1, 1.5, 2); !strings.Contains(got, "conclusive: the whole 95% CI is within") {
		t.Errorf("confidence inside = %q", got)
	}
	if got := confidence(1, 3, 2); !strings.Contains(got, "inconclusive") {
		t.Errorf("confidence straddling = %q", got)
	}
	if got := confidence(2.5, 3, 2); !strings.Contains(got, "above") {
		t.Errorf("confidence above = %q", got)
	}
}

func TestReadProcStatSelf(t *testing.T) {
	st, err := readProcStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st.PID != os.Getpid() || st.PPID != os.Getppid() {
		t.Errorf("self stat pid/ppid = %d/%d, want %d/%d", st.PID, st.PPID, os.Getpid(), os.Getppid())
	}
	rss, err := readRSS(os.Getpid())
	if err != nil || rss <= 0 {
		t.Errorf("readRSS(self) = %d, %v", rss, err)
	}
	tick := childproc.ProcFS{}.ClockTick()
	cpu, err := treeCPU(os.Getpid(), tick)
	if err != nil || cpu < 0 {
		t.Errorf("treeCPU(self) = %s, %v", cpu, err)
	}
	if _, err := treeCPU(-5, tick); err == nil {
		t.Error("treeCPU of a missing pid succeeded")
	}
}

func TestDescendants(t *testing.T) {
	procs := []procStat{
		{PID: 1, PPID: 0}, {PID: 10, PPID: 1}, {PID: 11, PPID: 10}, {PID: 12, PPID: 10},
		{PID: 13, PPID: 12}, {PID: 20, PPID: 1}, {PID: 21, PPID: 20},
	}
	var got []int
	for _, p := range descendants(procs, 10) {
		got = append(got, p.PID)
	}
	if !slices.Equal(got, []int{10, 11, 12, 13}) {
		t.Errorf("descendants(10) = %v, want [10 11 12 13]", got)
	}
	if d := descendants(procs, 99); d != nil {
		t.Errorf("descendants of a missing root = %v", d)
	}
}

func TestFmtFloat(t *testing.T) {
	for _, tc := range []struct {
		f    float64
		want string
	}{
		{412.34, "412.3"}, {8.5173, "8.517"}, {0.048213, "0.04821"}, {12.345, "12.35"},
		{20000, "20000"}, {0, "0"}, {-3.2, "-3.200"}, {math.NaN(), "NaN"}, {math.Inf(1), "NaN"},
		{1234.5, "1234"}, // never exponent form
	} {
		if got := fmtFloat(tc.f); got != tc.want {
			t.Errorf("fmtFloat(%v) = %q, want %q", tc.f, got, tc.want)
		}
	}
}

func TestSummary(t *testing.T) {
	s := newSummary("b_ratio", "a_ms")
	s.set("a_ms", 41.5)
	s.set("ok", true)
	s.set("codex_version", "codex cli 9.8.7")
	s.set("n", 3)
	var out bytes.Buffer
	if err := s.writeKV(&out); err != nil {
		t.Fatal(err)
	}
	want := "b_ratio=NaN\na_ms=41.50\nok=true\ncodex_version=codex_cli_9.8.7\nn=3\n"
	if out.String() != want {
		t.Errorf("writeKV =\n%s\nwant\n%s", out.String(), want)
	}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if k, v, ok := strings.Cut(line, "="); !ok || k == "" || v == "" || strings.ContainsAny(line, " \t") {
			t.Errorf("line %q is not name=value", line)
		}
	}
	js, err := s.marshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(js, &m); err != nil {
		t.Fatalf("summary JSON does not parse: %v\n%s", err, js)
	}
	if m["b_ratio"] != nil || m["a_ms"] != 41.5 || m["ok"] != true || m["n"] != float64(3) {
		t.Errorf("summary JSON = %v", m)
	}
	if i, j := bytes.Index(js, []byte(`"b_ratio"`)), bytes.Index(js, []byte(`"n"`)); i < 0 || j < i {
		t.Errorf("JSON keys out of order:\n%s", js)
	}
}

func TestWriteTable(t *testing.T) {
	var out bytes.Buffer
	rows := []row{
		{Comparison: "6 scale", Metric: "memory", Note: "RSS 17 MB"},
		{Comparison: "6 scale", Metric: "p50", A: sideCell("a", 1), B: sideCell("b", 2), Ratio: ratioCell(0.5)},
		{Comparison: "1 latency", Metric: "wall", A: sideCell("exec", 400), B: sideCell("daemon", 50), Ratio: ratioCell(8)},
	}
	if err := writeTable(&out, nil, rows); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{"COMPARISON", "1 latency", "6 scale", "", "notes:", "  6 scale, memory: RSS 17 MB"}
	if len(lines) != len(want) {
		t.Fatalf("table has %d lines, want %d:\n%s", len(lines), len(want), out.String())
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d = %q, want prefix %q", i, lines[i], w)
		}
	}
	if !strings.Contains(lines[1], "exec 400.0") || !strings.Contains(lines[1], "8.000x") {
		t.Errorf("latency row = %q", lines[1])
	}
	if rows[0].Comparison != "6 scale" {
		t.Error("writeTable reordered the caller's rows")
	}
	if ratioCell(math.NaN()) != "-" {
		t.Error("ratioCell(NaN) must be -")
	}

	// Two paths: the second path's row of the same metric and sides goes into further columns;
	// its notes are marked.
	out.Reset()
	rows = []row{
		{Path: "wss", Comparison: "1 latency", Metric: "wall", A: sideCell("exec", 700), B: sideCell("daemon", 100), Ratio: ratioCell(7)},
		{Path: "http", Comparison: "1 latency", Metric: "wall", A: sideCell("exec", 300), B: sideCell("daemon", 60), Ratio: ratioCell(5)},
		{Path: "wss", Comparison: "7 first", Metric: "wall", A: sideCell("exec", 1), B: sideCell("daemon(2 spares)", 1), Ratio: ratioCell(1)},
		{Path: "http", Comparison: "1 latency", Metric: "target", Note: "met"},
	}
	if err := writeTable(&out, []string{"wss", "http"}, rows); err != nil {
		t.Fatal(err)
	}
	lines = strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 6 || !strings.Contains(lines[0], "HTTP: SIDE A") ||
		!strings.Contains(lines[1], "exec 700.0") || !strings.Contains(lines[1], "exec 300.0") || !strings.Contains(lines[1], "5.000x") ||
		!strings.HasSuffix(strings.Join(strings.Fields(lines[2]), " "), "1.000x - - -") || lines[5] != "  1 latency [http], target: met" {
		t.Errorf("two-path table:\n%s", out.String())
	}
}

func TestRounds(t *testing.T) {
	for _, tc := range []struct{ msgs, rounds int }{{10, 2}, {10, 3}, {4, 4}, {7, 1}, {5, 2}} {
		total := 0
		for r := range tc.rounds {
			if got := roundStart(tc.msgs, tc.rounds, r); got != total {
				t.Errorf("roundStart(%d, %d, %d) = %d, want %d", tc.msgs, tc.rounds, r, got, total)
			}
			n := roundSize(tc.msgs, tc.rounds, r)
			if n < tc.msgs/tc.rounds || n > tc.msgs/tc.rounds+1 {
				t.Errorf("roundSize(%d, %d, %d) = %d: uneven", tc.msgs, tc.rounds, r, n)
			}
			total += n
		}
		if total != tc.msgs {
			t.Errorf("rounds of %d/%d add up to %d", tc.msgs, tc.rounds, total)
		}
	}
}

func TestAlternate(t *testing.T) {
	var order []string
	err := alternate(4, func(i int) error {
		order = append(order, "A")
		return nil
	}, func(i int) error {
		order = append(order, "B")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(order, ""); got != "ABBAABBA" {
		t.Errorf("order = %s, want ABBAABBA", got)
	}
	calls := 0
	err = alternate(3, func(int) error { calls++; return io.EOF }, func(int) error { calls++; return nil })
	if err != io.EOF || calls != 1 {
		t.Errorf("alternate after an error: err %v, %d calls; want EOF after 1", err, calls)
	}
}

func TestReplyChecks(t *testing.T) {
	if n, err := replyTurn("reply #51: history sample 1 after 50"); err != nil || n != 51 {
		t.Errorf("replyTurn = %d, %v", n, err)
	}
	for _, bad := range []string{"hello", "reply #x: y", "reply #3 no colon"} {
		if _, err := replyTurn(bad); err == nil {
			t.Errorf("replyTurn(%q) succeeded", bad)
		}
	}
	if err := checkHistory("reply #4: m", 4); err != nil {
		t.Error(err)
	}
	if err := checkHistory("reply #1: m", 4); err == nil {
		t.Error("checkHistory accepted a reply from a model that saw no history")
	}
	if err := checkReply("reply #2: latency message 2", "latency message 2"); err != nil {
		t.Error(err)
	}
	if err := checkReply("reply #2: latency message 3", "latency message 2"); err == nil {
		t.Error("checkReply accepted another message's reply")
	}
}

func TestParseConfig(t *testing.T) {
	env := func(k string) string {
		if k == "CODEX_BIN" {
			return "/opt/codex"
		}
		return ""
	}
	c, err := parseConfig([]string{"--quick", "--latency-msgs", "5"}, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	q := quickPreset()
	if c.CodexBin != "/opt/codex" || c.LatencyMsgs != 5 || c.OverheadTurns != q.overheadTurns || c.Timeout != q.timeout {
		t.Errorf("quick config = %+v", c)
	}
	if !slices.Equal(c.HistoryLevels, []int{1, 50, 200}) || !slices.Equal(c.Only, allComparisons()) {
		t.Errorf("levels %v only %v", c.HistoryLevels, c.Only)
	}
	// The quick run (CI) takes the production path only; the full run both, production first.
	if !slices.Equal(c.Paths, []string{pathWSS}) || c.RTT != 50*time.Millisecond {
		t.Errorf("quick paths %v rtt %s", c.Paths, c.RTT)
	}
	if full, err := parseConfig(nil, env, io.Discard); err != nil || !slices.Equal(full.Paths, []string{pathWSS, pathHTTP}) {
		t.Errorf("full paths %v (%v)", full.Paths, err)
	}
	if c, err := parseConfig([]string{"--paths", "http", "--rtt", "120ms"}, env, io.Discard); err != nil || !slices.Equal(c.Paths, []string{pathHTTP}) || c.RTT != 120*time.Millisecond {
		t.Errorf("--paths http --rtt 120ms: %v %s (%v)", c.Paths, c.RTT, err)
	}
	if c.FirstSamples != q.firstSamples || c.FirstSpares != 2 || c.MolChats != 32 || c.MolMsgs != q.molMsgs || !slices.Equal(c.GBChats, []int{8, 32}) {
		t.Errorf("quick new comparisons: first %d spares %d molecule %dx%d gb %v", c.FirstSamples, c.FirstSpares, c.MolChats, c.MolMsgs, c.GBChats)
	}
	c, err = parseConfig([]string{"--codex-bin", "x", "--spares", "0", "--gb-chats", "2,4,6", "--only", "firstmsg,chatsgb"}, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.FirstSpares != 0 || !slices.Equal(c.GBChats, []int{2, 4, 6}) || !c.runs(cmpFirstMsg) || !c.runs(cmpChatsGB) || c.runs(cmpMolecule) {
		t.Errorf("spares %d gb %v only %v", c.FirstSpares, c.GBChats, c.Only)
	}
	// The daemon runs in a scratch directory: a relative binary path would not resolve there.
	wd, _ := os.Getwd()
	if want := filepath.Join(wd, "bin", "supervisor"); c.SupervisorBin != want {
		t.Errorf("supervisor binary %q, want %q (absolute)", c.SupervisorBin, want)
	}
	c, err = parseConfig([]string{"--only", "scale"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatalf("scale alone needs no codex: %v", err)
	}
	if c.runs(cmpLatency) || !c.runs(cmpScale) || c.TPChats != fullPreset().tpChats {
		t.Errorf("only scale: %+v", c)
	}
	for _, args := range [][]string{
		{"--only", "latency"}, // no codex binary
		{"--codex-bin", "x", "--only", "nope"},
		{"--codex-bin", "x", "--history-levels", "50,1"},
		{"--codex-bin", "x", "--history-levels", "0"},
		{"--codex-bin", "x", "--tp-msgs", "2", "--tp-rounds", "3"},
		{"--codex-bin", "x", "--mem-chats", "-1"},
		{"--codex-bin", "x", "extra"},
		{"--codex-bin", "x", "--latency-msgs", "1"},
		{"--codex-bin", "x", "--tp-latency", "-1s"},
		{"--codex-bin", "x", "--spares", "-1"},
		{"--codex-bin", "x", "--gb-chats", "32,8"},
		{"--codex-bin", "x", "--gb-chats", "8,8"},
		{"--codex-bin", "x", "--gb-chats", "0"},
		{"--codex-bin", "x", "--gb-chats", "x"},
		{"--codex-bin", "x", "--mol-chats", "-1"},
		{"--codex-bin", "x", "--first-samples", "-2"},
		{"--codex-bin", "x", "--paths", "ws"},
		{"--codex-bin", "x", "--paths", "wss,wss"},
		{"--codex-bin", "x", "--rtt", "-1ms"},
	} {
		if _, err := parseConfig(args, func(string) string { return "" }, io.Discard); err == nil {
			t.Errorf("parseConfig(%v) succeeded", args)
		}
	}
}

func TestCodexJS(t *testing.T) {
	nm := t.TempDir()
	native := filepath.Join(nm, "@openai", "codex-linux-x64", "vendor", "x86_64-unknown-linux-musl", "bin", "codex")
	js := filepath.Join(nm, "@openai", "codex", "bin", "codex.js")
	for _, p := range []string{native, js} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := exectest.WriteExecutable(p, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Config{CodexBin: native}.codexJS()
	if err != nil || got != js {
		t.Errorf("codexJS = %q, %v; want %q", got, err, js)
	}
	if got, _ := (Config{CodexBin: native, CodexJS: "/x.js"}).codexJS(); got != "/x.js" {
		t.Errorf("--codex-js not honoured: %q", got)
	}
	if _, err := (Config{CodexBin: "/usr/bin/codex"}).codexJS(); err == nil {
		t.Error("codexJS found a wrapper that does not exist")
	}
}

// TestScaleWorker runs the codex-free scale measurement small: the supervisor with in-memory
// children must keep every session live and report sane numbers.
func TestScaleWorker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := runScaleWorker(ctx, scaleConfig{Sessions: 20, Turns: 200, Concurrency: 3})
	if err != nil {
		t.Fatal(err)
	}
	if r.Sessions != 20 || r.Turns != 200 || r.P50US <= 0 || r.P99US < r.P50US || r.RSSMB <= 0 {
		t.Errorf("scale result = %+v", r)
	}
	// One watcher per live child; key workers exit when their queue is empty.
	if r.GoroutinesPerSession < 0.9 || r.GoroutinesPerSession > 1.5 {
		t.Errorf("goroutines per session = %v, want about 1", r.GoroutinesPerSession)
	}
}

func seq(from, to int) []float64 {
	var out []float64
	for i := from; i <= to; i++ {
		out = append(out, float64(i))
	}
	return out
}

func short(xs []float64) []float64 {
	if len(xs) > 6 {
		return xs[:6]
	}
	return xs
}

func TestServerTimingMS(t *testing.T) {
	for _, tc := range []struct {
		header, name string
		want         float64
	}{
		{"turn;dur=41.237, daemon;dur=41.902", "turn", 41.237},
		{"turn;dur=41.237, daemon;dur=41.902", "daemon", 41.902},
		{`daemon;desc="x";dur=3`, "daemon", 3},
		{"turn;dur=x", "turn", math.NaN()},
		{"", "turn", math.NaN()},
		{"turnover;dur=1", "turn", math.NaN()},
	} {
		got := serverTimingMS(tc.header, tc.name)
		if got != tc.want && !(math.IsNaN(got) && math.IsNaN(tc.want)) {
			t.Errorf("serverTimingMS(%q, %q) = %v, want %v", tc.header, tc.name, got, tc.want)
		}
	}
}
