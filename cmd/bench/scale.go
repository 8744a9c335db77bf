package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/molecule-ai/codex-warm/supervisor"
)

// scaleWorkerCmd is the hidden subcommand that runs the scale measurement in a process of its
// own, so that its RSS is the supervisor's and not the bench's (mock models, buffers).
const scaleWorkerCmd = "scale-worker"

// scaleTimeout bounds the scale subprocess.
const scaleTimeout = 3 * time.Minute

// scaleConfig sizes a scale run.
type scaleConfig struct {
	Sessions    int
	Turns       int
	Concurrency int
}

// scaleResult is what the scale worker reports, as one JSON object on stdout.
type scaleResult struct {
	Sessions             int     `json:"sessions"`
	Turns                int     `json:"turns"`
	Concurrency          int     `json:"concurrency"`
	OpenSeconds          float64 `json:"open_seconds"`
	TurnSeconds          float64 `json:"turn_seconds"`
	P50US                float64 `json:"p50_us"`
	P99US                float64 `json:"p99_us"`
	MaxUS                float64 `json:"max_us"`
	RSSBaseMB            float64 `json:"rss_base_mb"`
	RSSMB                float64 `json:"rss_mb"`
	HeapMB               float64 `json:"heap_mb"`
	RSSPerSessionKB      float64 `json:"rss_per_session_kb"`
	Goroutines           int     `json:"goroutines"`
	GoroutinesPerSession float64 `json:"goroutines_per_session"`
}

// runScale is comparison 6: the supervisor with no codex, in a subprocess.
func (b *bench) runScale(ctx context.Context) error {
	const name = labelScale
	sc := scaleConfig{Sessions: b.cfg.ScaleSessions, Turns: b.cfg.ScaleTurns, Concurrency: b.cfg.ScaleConcurrency}
	b.logf("scale: %d live sessions, %d turns, %d submitter(s), in-memory children", sc.Sessions, sc.Turns, sc.Concurrency)
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("scale: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, scaleTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, scaleWorkerCmd,
		"--sessions", strconv.Itoa(sc.Sessions), "--turns", strconv.Itoa(sc.Turns),
		"--concurrency", strconv.Itoa(sc.Concurrency))
	cmd.Env = append(os.Environ(), b.ws.markerEnv())
	var out bytes.Buffer
	errOut := &tailWriter{max: 8 << 10}
	cmd.Stdout, cmd.Stderr = &out, errOut
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("scale worker: %w: %s", err, errOut.String())
	}
	var r scaleResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		return fmt.Errorf("scale worker: decode result: %w", err)
	}
	b.addNote(name, fmt.Sprintf("overhead/turn, %d turns over %d sessions", r.Turns, r.Sessions),
		fmt.Sprintf("p50 %s µs, p99 %s µs, max %s µs (%s turns/s, %d submitter(s))",
			fmtFloat(r.P50US), fmtFloat(r.P99US), fmtFloat(r.MaxUS), fmtFloat(float64(r.Turns)/r.TurnSeconds), r.Concurrency))
	b.addNote(name, "memory",
		fmt.Sprintf("RSS %s MB (%s MB before the pool, %s KB/session), Go heap %s MB",
			fmtFloat(r.RSSMB), fmtFloat(r.RSSBaseMB), fmtFloat(r.RSSPerSessionKB), fmtFloat(r.HeapMB)))
	b.addNote(name, "goroutines", fmt.Sprintf("%d with %d sessions idle: %s per session",
		r.Goroutines, r.Sessions, fmtFloat(r.GoroutinesPerSession)))
	b.sum.set("scale_p50_us", r.P50US)
	b.sum.set("scale_p99_us", r.P99US)
	b.sum.set("scale_rss_mb", r.RSSMB)
	b.sum.set("scale_heap_mb", r.HeapMB)
	b.sum.set("scale_rss_per_session_kb", r.RSSPerSessionKB)
	b.sum.set("scale_goroutines_per_session", r.GoroutinesPerSession)
	return nil
}

// scaleWorkerMain is the entry point of the scale subprocess.
func scaleWorkerMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(scaleWorkerCmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var sc scaleConfig
	fs.IntVar(&sc.Sessions, "sessions", 1000, "live sessions")
	fs.IntVar(&sc.Turns, "turns", 20000, "turns")
	fs.IntVar(&sc.Concurrency, "concurrency", 1, "submitting goroutines")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if sc.Sessions < 1 || sc.Turns < 1 || sc.Concurrency < 1 {
		fmt.Fprintln(stderr, "scale worker: sizes must be positive")
		return 2
	}
	r, err := runScaleWorker(ctx, sc)
	if err != nil {
		fmt.Fprintf(stderr, "scale worker: %v\n", err)
		return 1
	}
	if err := json.NewEncoder(stdout).Encode(r); err != nil {
		fmt.Fprintf(stderr, "scale worker: %v\n", err)
		return 1
	}
	return 0
}

// runScaleWorker opens sc.Sessions sessions (one turn each), counts goroutines and memory with
// all of them idle and live, then runs sc.Turns turns round-robin over the sessions and measures
// each Submit minus the fake turn's own time.
func runScaleWorker(ctx context.Context, sc scaleConfig) (scaleResult, error) {
	r := scaleResult{Sessions: sc.Sessions, Turns: sc.Turns, Concurrency: sc.Concurrency}
	runtime.GC()
	baseG := runtime.NumGoroutine()
	baseRSS, err := readRSS(os.Getpid())
	if err != nil {
		return r, err
	}
	r.RSSBaseMB = float64(baseRSS) / (1 << 20)

	sp := &fakeSpawner{}
	sup, err := supervisor.New(supervisor.Config{
		Spawn:       sp.spawn,
		MaxChildren: sc.Sessions,
		// The in-memory children cost no memory; the budget would charge each the estimate.
		MemoryBudget: -1,
		// Long enough that no session idles out during the run.
		IdleTTL: time.Hour,
	})
	if err != nil {
		return r, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = sup.Shutdown(sctx)
	}()
	key := func(i int) string { return "peer:scale-" + strconv.Itoa(i) }

	start := time.Now()
	for i := range sc.Sessions {
		if _, err := sup.Submit(ctx, key(i), "open"); err != nil {
			return r, fmt.Errorf("open session %d: %w", i, err)
		}
	}
	r.OpenSeconds = time.Since(start).Seconds()
	if live := sup.Status().Totals.Live; live != sc.Sessions {
		return r, fmt.Errorf("%d live sessions after opening %d", live, sc.Sessions)
	}
	runtime.GC()
	r.Goroutines = runtime.NumGoroutine() - baseG
	r.GoroutinesPerSession = float64(r.Goroutines) / float64(sc.Sessions)

	overUS, turnSecs, err := scaleTurns(ctx, sup, sc, key)
	if err != nil {
		return r, err
	}
	r.TurnSeconds = turnSecs
	r.P50US = percentile(overUS, 50)
	r.P99US = percentile(overUS, 99)
	r.MaxUS = percentile(overUS, 100)

	// Memory with every session still live, after the turns' garbage is collected.
	runtime.GC()
	var mst runtime.MemStats
	runtime.ReadMemStats(&mst)
	r.HeapMB = float64(mst.HeapInuse) / (1 << 20)
	rss, err := readRSS(os.Getpid())
	if err != nil {
		return r, err
	}
	r.RSSMB = float64(rss) / (1 << 20)
	r.RSSPerSessionKB = float64(rss-baseRSS) / 1024 / float64(sc.Sessions)
	if live := sup.Status().Totals.Live; live != sc.Sessions {
		return r, fmt.Errorf("%d live sessions after the turns, want %d", live, sc.Sessions)
	}
	return r, nil
}

// scaleTurns runs sc.Turns turns from sc.Concurrency goroutines. Goroutine g owns the sessions
// whose index ≡ g (mod concurrency), so no two submitters queue on one chat key and the
// measurement is the pool's overhead, not a key's FIFO wait. It returns the per-turn overheads
// in microseconds and the wall time of the whole run.
func scaleTurns(ctx context.Context, sup *supervisor.Supervisor, sc scaleConfig, key func(int) string) ([]float64, float64, error) {
	conc := min(sc.Concurrency, sc.Sessions)
	per := make([][]float64, conc)
	errs := make([]error, conc)
	var wg sync.WaitGroup
	start := time.Now()
	for g := range conc {
		wg.Go(func() {
			var mine []int
			for i := g; i < sc.Sessions; i += conc {
				mine = append(mine, i)
			}
			n := sc.Turns / conc
			if g < sc.Turns%conc {
				n++
			}
			out := make([]float64, 0, n)
			for t := range n {
				k := key(mine[t%len(mine)])
				t0 := time.Now()
				rep, err := sup.Submit(ctx, k, "turn")
				lat := time.Since(t0)
				if err != nil {
					errs[g] = fmt.Errorf("turn on %s: %w", k, err)
					return
				}
				out = append(out, float64(lat-rep.Duration)/float64(time.Microsecond))
			}
			per[g] = out
		})
	}
	wg.Wait()
	wall := time.Since(start).Seconds()
	if err := errors.Join(errs...); err != nil {
		return nil, 0, err
	}
	var all []float64
	for _, p := range per {
		all = append(all, p...)
	}
	return all, wall, nil
}
