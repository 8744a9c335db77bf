package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Comparison names, in the order they run (the cheap, codex-free one first).
const (
	cmpScale       = "scale"
	cmpLatency     = "latency"
	cmpOverhead    = "overhead"
	cmpThroughput  = "throughput"
	cmpHistory     = "history"
	cmpMemory      = "memory"
	cmpFirstMsg    = "firstmsg"
	cmpMolecule    = "molecule"
	cmpMolRealtime = "molrealtime"
	cmpChatsGB     = "chatsgb"
	cmpGrowth      = "growth"
	cmpLongThread  = "longthread"
	cmpShared      = "shared"
)

// Table labels of the comparisons, numbered as in the brief; the table is sorted by them.
const (
	labelLatency     = "1 latency"
	labelOverhead    = "2 daemon overhead"
	labelThroughput  = "3 throughput"
	labelHistory     = "4 history"
	labelMemory      = "5 memory"
	labelScale       = "6 scale (no codex)"
	labelFirstMsg    = "7 first message"
	labelMolecule    = "8 molecule throughput"
	labelMolRealtime = "8b molecule real-time"
	labelChatsGB     = "9 chats per GB"
	labelGrowth      = "9b growth" // after 9 in the string order the table is sorted by
	labelLongThread  = "9c long thread"
	labelShared      = "9d shared children"
)

// allComparisons lists every comparison in run order.
func allComparisons() []string {
	return []string{cmpScale, cmpLatency, cmpOverhead, cmpThroughput, cmpHistory, cmpMemory, cmpFirstMsg, cmpMolecule, cmpMolRealtime, cmpChatsGB, cmpGrowth, cmpLongThread, cmpShared}
}

// Config is everything a bench run is configured with. Size fields left zero by the flags are
// filled from the full or the --quick preset.
type Config struct {
	CodexBin      string
	SupervisorBin string
	CodexJS       string // node wrapper for the node-vs-native RSS comparison; "" = derived
	Node          string
	JSONFile      string
	Strict        bool
	Quick         bool
	Only          []string
	Timeout       time.Duration
	KeepTmp       bool
	MockInProcess bool
	// Paths are the network paths every comparison runs on, the first the one the summary's
	// plain keys and the table's first columns report; RTT is the round trip of pathWSS.
	Paths []string
	RTT   time.Duration

	LatencyMsgs      int
	OverheadTurns    int
	OverheadWarmup   int
	TPChats          int
	TPMsgs           int
	TPRounds         int
	TPLatency        time.Duration
	HistoryLevels    []int
	HistorySamples   int
	MemChats         int
	MemSamples       int
	ScaleSessions    int
	ScaleTurns       int
	ScaleConcurrency int
	FirstSamples     int
	FirstSpares      int // --spares of the spares side of the first-message comparison
	MolChats         int
	MolMsgs          int
	// MrtMsgs and MrtIdle size the Molecule real-time comparison: canvas messages per side, and
	// the idle window whose requests are counted.
	MrtMsgs int
	MrtIdle time.Duration
	GBChats []int
	// SharedN are the --threads-per-child settings the shared-children comparison runs side
	// by side; it measures chats per GB at SharedChats (ascending).
	SharedN     []int
	SharedChats []int
	GrowthTurns int
	// LongTurns is the long-thread comparison's thread length; LongSample the turns each of
	// its measurements runs.
	LongTurns  int
	LongSample int

	// OverheadAbsMS and OverheadPct are the daemon-overhead target: max(abs, pct of a bare turn).
	OverheadAbsMS float64
	OverheadPct   float64
}

// preset holds the sizes of a full or quick run.
type preset struct {
	latencyMsgs, overheadTurns, overheadWarmup  int
	tpChats, tpMsgs, tpRounds                   int
	historyLevels                               []int
	historySamples, memChats, memSamples        int
	scaleSessions, scaleTurns, scaleConcurrency int
	firstSamples, molChats, molMsgs             int
	mrtMsgs                                     int
	mrtIdle                                     time.Duration
	gbChats                                     []int
	growthTurns                                 int
	longTurns, longSample                       int
	paths                                       []string
	timeout                                     time.Duration
}

// fullPreset is the default run: the sizes the brief asks for, on the production path and then
// on loopback HTTP, well under 45 minutes on 2 cores.
func fullPreset() preset {
	return preset{
		latencyMsgs: 30, overheadTurns: 200, overheadWarmup: 3,
		tpChats: 16, tpMsgs: 10, tpRounds: 2,
		historyLevels: []int{1, 50, 200}, historySamples: 5,
		memChats: 8, memSamples: 2,
		scaleSessions: 1000, scaleTurns: 20000, scaleConcurrency: 1,
		firstSamples: 20, molChats: 32, molMsgs: 5, mrtMsgs: 20, mrtIdle: time.Minute, gbChats: []int{8, 32}, growthTurns: 100,
		longTurns: 2000, longSample: 50,
		paths:   []string{pathWSS, pathHTTP},
		timeout: 45 * time.Minute,
	}
}

// quickPreset is --quick: a few minutes, on the production path only. History and chats per GB keep their levels (the summary
// names them) and the Molecule comparison its 32 chats (fewer would hide a cap between them and
// 32), with fewer samples and messages.
func quickPreset() preset {
	return preset{
		latencyMsgs: 8, overheadTurns: 40, overheadWarmup: 2,
		tpChats: 4, tpMsgs: 4, tpRounds: 2,
		historyLevels: []int{1, 50, 200}, historySamples: 2,
		memChats: 3, memSamples: 1,
		scaleSessions: 1000, scaleTurns: 20000, scaleConcurrency: 1,
		firstSamples: 6, molChats: 32, molMsgs: 3, mrtMsgs: 6, mrtIdle: 20 * time.Second, gbChats: []int{8, 32}, growthTurns: 20,
		longTurns: 100, longSample: 20,
		paths:   []string{pathWSS},
		timeout: 8 * time.Minute,
	}
}

// parseConfig parses the command line. getenv supplies CODEX_BIN as the default codex binary.
func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	var c Config
	var only, levels, gbLevels, sharedN, paths string
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: bench --codex-bin PATH [flags]\n\n"+
			"Compares codex exec-per-message with the warm daemon on the real codex binary against a\n"+
			"mock model, over the transport production uses (websocket, TLS, a round trip) and over\n"+
			"loopback HTTP. Prints a table, then name=value summary lines.\n\nflags:\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&c.CodexBin, "codex-bin", getenv("CODEX_BIN"), "native codex binary (env CODEX_BIN)")
	fs.StringVar(&c.SupervisorBin, "supervisor-bin", "./bin/supervisor", "daemon binary (make build)")
	fs.StringVar(&c.CodexJS, "codex-js", "", "npm node wrapper codex.js for the RSS comparison; default: found next to --codex-bin")
	fs.StringVar(&c.Node, "node", "node", "node executable for the node wrapper")
	fs.StringVar(&c.JSONFile, "json", "", "also write the summary as JSON to this file")
	fs.BoolVar(&c.Strict, "strict", false, "exit non-zero when the daemon overhead target is missed")
	fs.BoolVar(&c.Quick, "quick", false, "small sizes for a run of a few minutes")
	fs.StringVar(&only, "only", "", "comma-separated comparisons to run: "+strings.Join(allComparisons(), ","))
	fs.DurationVar(&c.Timeout, "timeout", 0, "bound of the whole run (default 45m, quick 8m)")
	fs.BoolVar(&c.KeepTmp, "keep-tmp", false, "keep the scratch directory (codex homes, daemon state)")
	fs.BoolVar(&c.MockInProcess, "mock-in-process", false, "serve the mock model from the bench process instead of a subprocess")
	fs.StringVar(&paths, "paths", "", "network paths every comparison runs on, the first reported first: "+
		pathWSS+" (websocket + TLS + --rtt, as production), "+pathHTTP+" (HTTP + SSE on loopback) (default wss,http; quick wss)")
	fs.DurationVar(&c.RTT, "rtt", 50*time.Millisecond, "round trip the proxy between codex and the model adds on the "+pathWSS+" path")

	fs.IntVar(&c.LatencyMsgs, "latency-msgs", 0, "messages in the one-chat latency run (default 30, quick 8)")
	fs.IntVar(&c.OverheadTurns, "overhead-turns", 0, "measured turns per side in the overhead run (default 200, quick 40)")
	fs.IntVar(&c.OverheadWarmup, "overhead-warmup", 0, "unmeasured turns per side first (default 3, quick 2)")
	fs.IntVar(&c.TPChats, "tp-chats", 0, "chats in the throughput run (default 16, quick 4)")
	fs.IntVar(&c.TPMsgs, "tp-msgs", 0, "messages per chat in the throughput run (default 10, quick 4)")
	fs.IntVar(&c.TPRounds, "tp-rounds", 0, "alternating rounds the throughput messages are split into (default 2)")
	fs.DurationVar(&c.TPLatency, "tp-latency", 500*time.Millisecond, "mock model latency per response in the throughput run")
	fs.StringVar(&levels, "history-levels", "", "earlier turns at which to measure (default 1,50,200)")
	fs.IntVar(&c.HistorySamples, "history-samples", 0, "samples per side and level (default 5, quick 2)")
	fs.IntVar(&c.MemChats, "mem-chats", 0, "live chats for the daemon RSS per child (default 8, quick 3)")
	fs.IntVar(&c.MemSamples, "mem-samples", 0, "children per side for native vs node RSS (default 2, quick 1)")
	fs.IntVar(&c.ScaleSessions, "scale-sessions", 0, "live sessions in the codex-free scale run (default 1000)")
	fs.IntVar(&c.ScaleTurns, "scale-turns", 0, "turns in the scale run (default 20000)")
	fs.IntVar(&c.ScaleConcurrency, "scale-concurrency", 0, "goroutines submitting in the scale run (default 1: pure overhead)")
	fs.IntVar(&c.FirstSamples, "first-samples", 0, "new chats per side in the first-message run (default 20, quick 6)")
	fs.IntVar(&c.FirstSpares, "spares", 2, "--spares of the daemon side with spare children in the first-message run")
	fs.IntVar(&c.MolChats, "mol-chats", 0, "chats in the Molecule throughput run; also the daemons' --max-children there (default 32)")
	fs.IntVar(&c.MolMsgs, "mol-msgs", 0, "messages per chat in the Molecule throughput run (default 5, quick 3)")
	fs.IntVar(&c.MrtMsgs, "mrt-msgs", 0, "canvas messages per side in the Molecule real-time run (default 20, quick 6)")
	fs.DurationVar(&c.MrtIdle, "mrt-idle", 0, "idle window whose platform requests are counted per side in the Molecule real-time run (default 1m, quick 20s)")
	fs.StringVar(&sharedN, "shared-n", "", "--threads-per-child settings of the shared-children run, ascending (default 1,4,8,16)")
	fs.StringVar(&gbLevels, "gb-chats", "", "warm chats at which to measure chats per GB, ascending (default 8,32)")
	fs.IntVar(&c.GrowthTurns, "growth-turns", 0, "measured warm turns at each number of known chats in the growth run (default 100, quick 20)")
	fs.IntVar(&c.LongTurns, "long-turns", 0, "turns of the thread in the long-thread run, before its compaction (default 2000, quick 100)")
	fs.IntVar(&c.LongSample, "long-sample", 0, "turns each long-thread measurement runs (default 50, quick 20)")
	fs.Float64Var(&c.OverheadAbsMS, "overhead-target-ms", 2, "daemon overhead target, absolute part")
	fs.Float64Var(&c.OverheadPct, "overhead-target-pct", 5, "daemon overhead target, relative part")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	// The daemon starts in a scratch directory, where a relative path means something else.
	abs, err := filepath.Abs(c.SupervisorBin)
	if err != nil {
		return c, fmt.Errorf("--supervisor-bin %s: %w", c.SupervisorBin, err)
	}
	c.SupervisorBin = abs

	p := fullPreset()
	if c.Quick {
		p = quickPreset()
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.LatencyMsgs, p.latencyMsgs)
	def(&c.OverheadTurns, p.overheadTurns)
	def(&c.OverheadWarmup, p.overheadWarmup)
	def(&c.TPChats, p.tpChats)
	def(&c.TPMsgs, p.tpMsgs)
	def(&c.TPRounds, p.tpRounds)
	def(&c.HistorySamples, p.historySamples)
	def(&c.MemChats, p.memChats)
	def(&c.MemSamples, p.memSamples)
	def(&c.ScaleSessions, p.scaleSessions)
	def(&c.ScaleTurns, p.scaleTurns)
	def(&c.ScaleConcurrency, p.scaleConcurrency)
	def(&c.FirstSamples, p.firstSamples)
	def(&c.MolChats, p.molChats)
	def(&c.MolMsgs, p.molMsgs)
	def(&c.MrtMsgs, p.mrtMsgs)
	if c.MrtIdle <= 0 {
		c.MrtIdle = p.mrtIdle
	}
	def(&c.GrowthTurns, p.growthTurns)
	def(&c.LongTurns, p.longTurns)
	def(&c.LongSample, p.longSample)
	if c.Timeout == 0 {
		c.Timeout = p.timeout
	}
	c.HistoryLevels = p.historyLevels
	if levels != "" {
		var err error
		if c.HistoryLevels, err = parseInts(levels); err != nil {
			return c, fmt.Errorf("--history-levels: %w", err)
		}
	}
	c.SharedN, c.SharedChats = []int{1, 4, 8, 16}, []int{24, 32}
	if c.Quick {
		c.SharedN, c.SharedChats = []int{1, 8}, []int{8, 16}
	}
	if sharedN != "" {
		var err error
		if c.SharedN, err = parseInts(sharedN); err != nil {
			return c, fmt.Errorf("--shared-n: %w", err)
		}
	}
	c.GBChats = p.gbChats
	if gbLevels != "" {
		var err error
		if c.GBChats, err = parseInts(gbLevels); err != nil {
			return c, fmt.Errorf("--gb-chats: %w", err)
		}
	}
	c.Paths = p.paths
	if paths != "" {
		c.Paths = nil
		for name := range strings.SplitSeq(paths, ",") {
			name = strings.TrimSpace(name)
			if !slices.Contains(allPaths(), name) || slices.Contains(c.Paths, name) {
				return c, fmt.Errorf("--paths: %q is not one of %s, or repeated", name, strings.Join(allPaths(), ","))
			}
			c.Paths = append(c.Paths, name)
		}
	}
	c.Only = allComparisons()
	if only != "" {
		c.Only = nil
		for name := range strings.SplitSeq(only, ",") {
			name = strings.TrimSpace(name)
			if !slices.Contains(allComparisons(), name) {
				return c, fmt.Errorf("--only: unknown comparison %q (have %s)", name, strings.Join(allComparisons(), ","))
			}
			c.Only = append(c.Only, name)
		}
	}
	return c, c.validate()
}

func (c Config) validate() error {
	var errs []error
	if c.CodexBin == "" && c.needsCodex() {
		errs = append(errs, errors.New("--codex-bin (or CODEX_BIN) is required"))
	}
	for _, v := range []struct {
		name string
		n    int
	}{
		{"overhead-turns", c.OverheadTurns}, {"tp-chats", c.TPChats},
		{"tp-msgs", c.TPMsgs}, {"tp-rounds", c.TPRounds}, {"history-samples", c.HistorySamples},
		{"mem-chats", c.MemChats}, {"mem-samples", c.MemSamples}, {"scale-sessions", c.ScaleSessions},
		{"scale-turns", c.ScaleTurns}, {"scale-concurrency", c.ScaleConcurrency},
		{"first-samples", c.FirstSamples}, {"mol-chats", c.MolChats}, {"mol-msgs", c.MolMsgs}, {"mrt-msgs", c.MrtMsgs}, {"growth-turns", c.GrowthTurns}, {"long-sample", c.LongSample},
	} {
		if v.n < 1 {
			errs = append(errs, fmt.Errorf("--%s %d: must be at least 1", v.name, v.n))
		}
	}
	if c.LatencyMsgs < 2 {
		// The first message (thread start / spawn) is reported apart from the rest.
		errs = append(errs, fmt.Errorf("--latency-msgs %d: must be at least 2", c.LatencyMsgs))
	}
	if c.LongTurns <= c.LongSample {
		errs = append(errs, fmt.Errorf("--long-turns %d must exceed --long-sample %d", c.LongTurns, c.LongSample))
	}
	if c.RTT < 0 {
		errs = append(errs, fmt.Errorf("--rtt %s: must not be negative", c.RTT))
	}
	if c.TPLatency < 0 {
		errs = append(errs, fmt.Errorf("--tp-latency %s: must not be negative", c.TPLatency))
	}
	if c.TPRounds > c.TPMsgs {
		errs = append(errs, fmt.Errorf("--tp-rounds %d exceeds --tp-msgs %d", c.TPRounds, c.TPMsgs))
	}
	for _, l := range c.HistoryLevels {
		if l < 1 {
			errs = append(errs, fmt.Errorf("--history-levels: %d: levels start at 1", l))
		}
	}
	if !slices.IsSorted(c.HistoryLevels) {
		errs = append(errs, errors.New("--history-levels must be ascending"))
	}
	if c.FirstSpares < 0 {
		errs = append(errs, fmt.Errorf("--spares %d: must not be negative", c.FirstSpares))
	}
	if len(c.GBChats) == 0 {
		errs = append(errs, errors.New("--gb-chats: at least one level"))
	}
	for _, l := range c.GBChats {
		if l < 1 {
			errs = append(errs, fmt.Errorf("--gb-chats: %d: levels start at 1", l))
		}
	}
	if !slices.IsSorted(c.GBChats) || len(slices.Compact(slices.Clone(c.GBChats))) != len(c.GBChats) {
		errs = append(errs, errors.New("--gb-chats must be strictly ascending"))
	}
	return errors.Join(errs...)
}

func (c Config) runs(name string) bool { return slices.Contains(c.Only, name) }

func (c Config) needsCodex() bool {
	return slices.ContainsFunc(c.Only, func(n string) bool { return n != cmpScale })
}

// codexJS returns the node wrapper to compare against: --codex-js, else the npm layout around
// the native binary (<node_modules>/@openai/codex-<platform>/vendor/<triple>/bin/codex →
// <node_modules>/@openai/codex/bin/codex.js).
func (c Config) codexJS() (string, error) {
	if c.CodexJS != "" {
		return c.CodexJS, nil
	}
	// Up five levels, past bin, <triple>, vendor and codex-<platform>, to @openai.
	dir := c.CodexBin
	for range 5 {
		dir = filepath.Dir(dir)
	}
	js := filepath.Join(dir, "codex", "bin", "codex.js")
	if _, err := os.Stat(js); err != nil {
		return "", fmt.Errorf("node wrapper not found next to %s (%w); pass --codex-js", c.CodexBin, err)
	}
	return js, nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}
