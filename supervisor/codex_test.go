package supervisor

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/appserver/appservertest"
	"github.com/molecule-ai/codex-warm/internal/childproc"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
	"github.com/molecule-ai/codex-warm/sessions"
)

// The durable store is the production ThreadStore.
var _ ThreadStore = (*sessions.Store)(nil)

// End-to-end tests: the real codex binary, pointed at the mock Responses API. They prove the
// product: warm sessions keep their own history, survive a killed child and an eviction.

// codexSup starts a supervisor on real codex and a mock model with script (nil: default).
func codexSup(t *testing.T, script func(mockmodel.Request) mockmodel.Reply, mut func(*Config)) (*Supervisor, *mockmodel.Model) {
	t.Helper()
	bin := appservertest.CodexBin(t)
	m, err := mockmodel.New(mockmodel.Config{Script: script})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	home, cwd := t.TempDir(), t.TempDir()
	if err := m.WriteCodexHome(home); err != nil {
		t.Fatal(err)
	}
	log := testLogger(t)
	cfg := Config{
		AppServer:   appserver.Config{Bin: bin, CodexHome: home, Dir: cwd, Logger: log},
		Thread:      appserver.ThreadOptions{Cwd: cwd, ApprovalPolicy: "never", Sandbox: "read-only"},
		MaxChildren: 4,
		Logger:      log,
	}
	if mut != nil {
		mut(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Registered after the mock and the temp dirs: runs before them.
	t.Cleanup(func() { shutdown(t, s) })
	return s, m
}

func keyOf(text string) string { k, _, _ := strings.Cut(text, "-"); return k }

func TestCodexKeysKeepOwnHistoryAndOverlap(t *testing.T) {
	t.Parallel()
	keys := []string{"alpha", "bravo", "charlie"}
	// The first model request of each key waits until the first requests of all three keys are
	// at the mock at once: that only happens if the keys' turns overlap in time.
	var mu sync.Mutex
	first := map[string]bool{}
	allIn := make(chan struct{})
	overlapped := true
	script := func(req mockmodel.Request) mockmodel.Reply {
		k := keyOf(req.LastUserText)
		mu.Lock()
		isFirst := !first[k]
		first[k] = true
		if isFirst && len(first) == len(keys) {
			close(allIn)
		}
		mu.Unlock()
		if isFirst {
			select {
			case <-allIn:
			case <-time.After(30 * time.Second):
				mu.Lock()
				overlapped = false
				mu.Unlock()
			}
		}
		return mockmodel.DefaultScript(req)
	}
	s, m := codexSup(t, script, nil)
	ctx := testCtx(t)

	type result struct {
		text string
		r    Reply
		err  error
	}
	results := make(chan result, 9)
	var wg sync.WaitGroup
	for _, k := range keys {
		for i := 1; i <= 3; i++ {
			text := fmt.Sprintf("%s-%d", k, i)
			wg.Go(func() {
				r, err := s.Submit(ctx, k, text)
				results <- result{text, r, err}
			})
		}
	}
	wg.Wait()
	close(results)

	nums := map[string][]int{}
	threads := map[string]string{}
	for res := range results {
		if res.err != nil {
			t.Fatalf("%s: %v", res.text, res.err)
		}
		var n int
		if _, err := fmt.Sscanf(res.r.Text, "reply #%d:", &n); err != nil || res.r.Text != fmt.Sprintf("reply #%d: %s", n, res.text) {
			t.Fatalf("%s: reply %q", res.text, res.r.Text)
		}
		k := keyOf(res.text)
		nums[k] = append(nums[k], n)
		if th, ok := threads[k]; ok && th != res.r.ThreadID {
			t.Fatalf("%s on thread %s, its key's other turns on %s", res.text, res.r.ThreadID, th)
		}
		threads[k] = res.r.ThreadID
	}
	for _, k := range keys {
		slices.Sort(nums[k])
		if !slices.Equal(nums[k], []int{1, 2, 3}) {
			t.Errorf("key %s reply numbers %v, want 1, 2, 3", k, nums[k])
		}
	}
	if !overlapped {
		t.Error("the keys' first turns were never at the model at the same time")
	}
	// Each request carries only its own key's history, growing one message per turn: a turn that
	// overlapped another of its key would have been merged into it by codex and broken the chain.
	last := map[string][]string{}
	for _, req := range m.Requests() {
		k := keyOf(req.LastUserText)
		for _, u := range req.UserTexts {
			if keyOf(u) != k {
				t.Errorf("request %d of %s carries %q: %v", req.N, k, u, req.UserTexts)
			}
		}
		if prev := last[k]; len(req.UserTexts) != len(prev)+1 || !slices.Equal(req.UserTexts[:len(prev)], prev) {
			t.Errorf("request %d of %s: history %v after %v", req.N, k, req.UserTexts, prev)
		}
		last[k] = req.UserTexts
	}
}

func TestCodexKilledChildResumes(t *testing.T) {
	t.Parallel()
	s, m := codexSup(t, nil, nil)
	ctx := testCtx(t)
	mustSubmit(t, s, "a", "one")
	r2 := mustSubmit(t, s, "a", "two")
	if err := syscall.Kill(r2.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Noticed between turns, without a message.
	waitFor(t, "the dead child retired", func() bool {
		st := s.Status()
		return st.Totals.Retired[WatchdogDead] == 1 && st.Totals.Live == 0
	})
	r3, err := s.Submit(ctx, "a", "three")
	if err != nil {
		t.Fatal(err)
	}
	if r3.Text != "reply #3: three" || r3.ThreadID != r2.ThreadID || r3.PID == r2.PID {
		t.Fatalf("after SIGKILL: %+v (before: thread %s pid %d)", r3, r2.ThreadID, r2.PID)
	}
	if got := s.Status().Children[0].Restarts; got != 1 {
		t.Fatalf("restarts %d, want 1", got)
	}
	reqs := m.Requests()
	if got := reqs[len(reqs)-1].UserTexts; !slices.Equal(got, []string{"one", "two", "three"}) {
		t.Fatalf("history sent to the model %v", got)
	}
}

func TestCodexEvictedKeyKeepsHistory(t *testing.T) {
	t.Parallel()
	s, _ := codexSup(t, nil, func(c *Config) { c.MaxChildren = 2 })
	ra := mustSubmit(t, s, "a", "a1")
	mustSubmit(t, s, "b", "b1")
	mustSubmit(t, s, "c", "c1") // evicts a, the least recently used
	ra2 := mustSubmit(t, s, "a", "a2")
	if ra2.Text != "reply #2: a2" || ra2.ThreadID != ra.ThreadID || ra2.PID == ra.PID {
		t.Fatalf("evicted key: %+v (before: %+v)", ra2, ra)
	}
	st := s.Status()
	if st.Totals.Live != 2 || st.Totals.Retired[ReasonEvicted] != 2 {
		t.Fatalf("totals %+v", st.Totals)
	}
	// Memory is proportional: a warm child shares most of its resident pages (the codex binary)
	// with the others, so its PSS is well below its RSS, and what is its own (USS) below that.
	var sum memorySum
	for _, c := range st.Children {
		if c.RSSBytes == 0 || c.PID == 0 {
			t.Errorf("row without pid/rss: %+v", c)
		}
		if c.PSSBytes <= 0 || c.USSBytes <= 0 || c.PSSBytes >= c.RSSBytes || c.USSBytes > c.PSSBytes {
			t.Errorf("child %d memory: rss %d pss %d uss %d, want 0 < uss <= pss < rss", c.PID, c.RSSBytes, c.PSSBytes, c.USSBytes)
		}
		sum.rss += c.RSSBytes
		sum.pss += c.PSSBytes
		sum.uss += c.USSBytes
	}
	if got := st.Totals; got.RSSBytes != sum.rss || got.PSSBytes != sum.pss || got.USSBytes != sum.uss {
		t.Errorf("totals rss %d pss %d uss %d, want the rows' sums %+v", got.RSSBytes, got.PSSBytes, got.USSBytes, sum)
	}
}

// memorySum sums the rows' memory readings.
type memorySum struct{ rss, pss, uss int64 }

// TestCodexTurnDeadline: a hung model stream trips the turn deadline; codex honours the
// interrupt, so the child stays warm and answers the next message with the history intact. The
// deadline bounds the other turns too, so it is one they never come near on a loaded machine.
func TestCodexTurnDeadline(t *testing.T) {
	t.Parallel()
	s, _ := codexSup(t, nil, func(c *Config) { c.TurnDeadline = 10 * time.Second })
	ctx := testCtx(t)
	r1 := mustSubmit(t, s, "a", "one")
	_, err := s.Submit(ctx, "a", "please HANG")
	var we *WatchdogError
	if !errors.As(err, &we) || we.Watchdog != WatchdogTurn {
		t.Fatalf("err = %v, want turn deadline", err)
	}
	r3, err := s.Submit(ctx, "a", "three")
	if err != nil {
		t.Fatal(err)
	}
	if r3.PID != r1.PID || !strings.HasSuffix(r3.Text, ": three") {
		t.Fatalf("after deadline: %+v", r3)
	}
}

// TestCodexDaemonRestartKeepsContext: a second supervisor on the same sessions store (a daemon
// restart) resumes the key's thread in a new child.
func TestCodexDaemonRestartKeepsContext(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	first, _ := codexSup(t, nil, func(c *Config) { c.Store = openStore(t, state); c.StateDir = state })
	r1 := mustSubmit(t, first, "canvas:ws", "remember me")
	second := restart(t, first, state)
	r2 := mustSubmit(t, second, "canvas:ws", "still there?")
	if r2.ThreadID != r1.ThreadID || r2.Text != "reply #2: still there?" || r2.NewThread || r2.ResumeFailed {
		t.Fatalf("after restart: %+v (before: thread %s)", r2, r1.ThreadID)
	}
}

// TestCodexRerunAfterKilledTurnSeenOnce: the daemon dies mid-turn, so the message was never
// acknowledged and runs again after the restart, in a fresh child that resumes the thread. The
// killed turn's user message is already in the thread's history (codex shows that turn as
// interrupted): the model must still see the message once, and the turns after it as usual.
func TestCodexRerunAfterKilledTurnSeenOnce(t *testing.T) {
	t.Parallel()
	var hung atomic.Bool
	script := func(req mockmodel.Request) mockmodel.Reply {
		if req.LastUserText == "crash-me" && !req.HasToolOutput && hung.CompareAndSwap(false, true) {
			return mockmodel.Reply{Hang: true}
		}
		return mockmodel.DefaultScript(req)
	}
	state := t.TempDir()
	first, m := codexSup(t, script, func(c *Config) { c.Store = openStore(t, state); c.StateDir = state })
	ctx := testCtx(t)
	r1 := mustSubmit(t, first, "a", "before")
	p := submitAsync(ctx, first, "a", "crash-me")
	if err := m.WaitHung(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(-row(t, first, "a").PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var we *WatchdogError
	if _, err := p.wait(); !errors.As(err, &we) || we.Watchdog != WatchdogDead {
		t.Fatalf("killed turn: err = %v, want watchdog %s", err, WatchdogDead)
	}

	second := restart(t, first, state)
	r2 := mustSubmit(t, second, "a", "crash-me")
	r3 := mustSubmit(t, second, "a", "after")
	if r2.ThreadID != r1.ThreadID || r3.ThreadID != r1.ThreadID {
		t.Fatalf("threads %s, %s; want the first one, %s", r2.ThreadID, r3.ThreadID, r1.ThreadID)
	}
	reqs := m.Requests()
	if len(reqs) < 2 {
		t.Fatalf("%d model requests", len(reqs))
	}
	rerun, next := reqs[len(reqs)-2].UserTexts, reqs[len(reqs)-1].UserTexts
	if n := countOf(rerun, "crash-me"); n != 1 || r2.Text != "reply #2: crash-me" {
		t.Errorf("the re-run message reached the model %d times (history %q, reply %q), want once", n, rerun, r2.Text)
	}
	if !slices.Equal(next, []string{"before", "crash-me", "after"}) {
		t.Errorf("history of the next turn %q, want before, crash-me, after", next)
	}
}

// restart shuts first down and starts a second supervisor on the same state dir, sessions store,
// CODEX_HOME and workspace (where codex keeps the threads' rollouts): a daemon restart.
func restart(t *testing.T, first *Supervisor, state string) *Supervisor {
	t.Helper()
	if err := first.Shutdown(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	second, err := New(Config{
		AppServer: appserver.Config{Bin: appservertest.CodexBin(t), CodexHome: first.cfg.AppServer.CodexHome,
			Dir: first.cfg.AppServer.Dir, Logger: testLogger(t)},
		Thread:   first.cfg.Thread,
		Store:    openStore(t, state),
		StateDir: state,
		Logger:   testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shutdown(t, second) })
	return second
}

func openStore(t *testing.T, dir string) *sessions.Store {
	t.Helper()
	store, err := sessions.Open(sessions.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

func countOf(texts []string, s string) int {
	n := 0
	for _, x := range texts {
		if x == s {
			n++
		}
	}
	return n
}

// TestCodexMemoryReadings: childproc.ProcFS.Memory of a real, warm codex child agrees with a sum
// over its /proc/PID/smaps computed here by hand (PSS: the Pss lines; private: Private_Clean +
// Private_Dirty), and the memory sampler feeds the same kind of reading to the budget. Memory
// moves between the reads, and smaps rounds each mapping to a kB, so small drift is allowed.
//
// Not parallel: the package's other codex children map the same binary, and their starts and
// exits would move this child's PSS between the reads it compares.
func TestCodexMemoryReadings(t *testing.T) {
	s, _ := codexSup(t, nil, func(c *Config) { c.MemorySampleInterval = 20 * time.Millisecond })
	r := mustSubmit(t, s, "a", "one")
	mustSubmit(t, s, "a", "two")

	near := func(a, b int64) bool {
		d := a - b
		if d < 0 {
			d = -d
		}
		return d <= max(2<<20, b/20) // 2 MiB or 5%
	}
	// The reading is taken between two hand-computed ones and judged only when those two agree:
	// on a busy machine the child's private pages, and the PSS share of pages other codex
	// processes map too, can move by tens of MiB between reads. Each try is quick; a machine
	// that never holds still for one fails after the tries.
	var got childproc.Memory
	var pss, uss int64
	settled := false
	for try := 0; try < 50 && !settled; try++ {
		pss0, uss0 := smapsSums(t, r.PID)
		m, err := childproc.ProcFS{}.Memory(r.PID)
		if err != nil {
			t.Fatal(err)
		}
		pss1, uss1 := smapsSums(t, r.PID)
		got, pss, uss = m, pss1, uss1
		settled = near(pss0, pss1) && near(uss0, uss1)
	}
	if !settled {
		t.Fatalf("codex pid %d: its memory never held still between two reads in 50 tries", r.PID)
	}
	if !near(got.PSS, pss) || !near(got.USS, uss) {
		t.Errorf("codex pid %d: ProcFS.Memory pss %d uss %d; smaps sums pss %d private %d", r.PID, got.PSS, got.USS, pss, uss)
	}
	// With no other child mapping the codex binary, its pages are all private: PSS = USS ≈ RSS.
	if got.USS <= 0 || got.USS > got.PSS {
		t.Errorf("codex pid %d: rss %d pss %d uss %d, want 0 < uss <= pss", r.PID, got.RSS, got.PSS, got.USS)
	}
	t.Logf("warm codex child: rss %d MiB, pss %d MiB, private %d MiB", got.RSS>>20, got.PSS>>20, got.USS>>20)

	waitFor(t, "the sampler to measure the child", func() bool { return s.Status().Totals.MeasuredPSSBytes > 0 })
	tot := s.Status().Totals
	// One warm child, measured: it is all the budget counts, and what it expects of the next.
	if tot.ChildEstimateBytes != tot.MeasuredPSSBytes || tot.ChargedBytes != tot.MeasuredPSSBytes || tot.MemoryBudgetBytes <= 0 {
		t.Errorf("budget totals %+v after one warm child measured", tot)
	}
}

// smapsSums adds up the Pss lines and the Private_Clean and Private_Dirty lines of
// /proc/pid/smaps, in bytes.
func smapsSums(t *testing.T, pid int) (pss, private int64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) != 3 || f[2] != "kB" {
			continue
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			t.Fatalf("smaps line %q: %v", line, err)
		}
		switch f[0] {
		case "Pss:":
			pss += kb << 10
		case "Private_Clean:", "Private_Dirty:":
			private += kb << 10
		}
	}
	if pss == 0 || private == 0 {
		t.Fatalf("smaps of pid %d has no Pss or Private lines", pid)
	}
	return pss, private
}

// TestCodexMemoryRecycle: a real codex child whose private memory passes the limit (here any
// child: the limit is 1 MiB) is retired with reason memory once idle, and the chat's next message
// resumes its thread in a new child, with the whole history sent to the model.
func TestCodexMemoryRecycle(t *testing.T) {
	t.Parallel()
	s, m := codexSup(t, nil, func(c *Config) {
		c.MemorySampleInterval = 20 * time.Millisecond
		c.ChildMemoryLimit = 1 << 20
	})
	r1 := mustSubmit(t, s, "a", "one")
	waitFor(t, "the bloated child recycled", func() bool {
		st := s.Status()
		return st.Totals.Retired[ReasonMemory] >= 1 && st.Totals.Live == 0
	})
	r2 := mustSubmit(t, s, "a", "two")
	if r2.Text != "reply #2: two" || r2.ThreadID != r1.ThreadID || r2.PID == r1.PID {
		t.Fatalf("after recycle: %+v (before: thread %s pid %d)", r2, r1.ThreadID, r1.PID)
	}
	reqs := m.Requests()
	if got := reqs[len(reqs)-1].UserTexts; !slices.Equal(got, []string{"one", "two"}) {
		t.Fatalf("history sent to the model %v", got)
	}
}
