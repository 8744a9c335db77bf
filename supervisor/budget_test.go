package supervisor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/molecule-ai/codex-warm/internal/childproc"
)

const mib = 1 << 20

// fakeMem is the children's memory as Config.Memory reads it, set per pid by the test: that is
// how a fake child grows. A pid without a reading fails like a process /proc cannot show.
type fakeMem struct {
	mu sync.Mutex
	m  map[int]childproc.Memory
}

func newFakeMem() *fakeMem { return &fakeMem{m: make(map[int]childproc.Memory)} }

func (f *fakeMem) set(pid int, pss, uss int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.m[pid] = childproc.Memory{RSS: pss + 90*mib, PSS: pss, USS: uss}
}

func (f *fakeMem) read(pid int) (childproc.Memory, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.m[pid]
	if !ok {
		return childproc.Memory{}, fmt.Errorf("pid %d: no reading", pid)
	}
	return m, nil
}

// sampleEvery is the memory sample interval of these tests; sampled lets one sample happen.
const sampleEvery = 5 * time.Second

func sampled() {
	time.Sleep(sampleEvery)
	synctest.Wait()
}

// newBudgetSup is newSup with the memory read from fm and a sample every sampleEvery.
func newBudgetSup(t *testing.T, w *fakeWorld, fm *fakeMem, mut func(*Config)) *Supervisor {
	return newSup(t, w, func(c *Config) {
		c.Memory = fm.read
		c.MemorySampleInterval = sampleEvery
		if mut != nil {
			mut(c)
		}
	})
}

// TestBudgetEvictsBelowMaxChildren: with the budget full, a new chat evicts the least recently
// used idle child although MaxChildren is far from reached, and the evicted chat comes back on a
// new child that resumes its thread.
func TestBudgetEvictsBelowMaxChildren(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w, fm := newFakeWorld(), newFakeMem()
		s := newBudgetSup(t, w, fm, func(c *Config) { c.MaxChildren = 8; c.MemoryBudget = 250 * mib })
		defer shutdown(t, s)
		ra := mustSubmit(t, s, "a", "a1")
		rb := mustSubmit(t, s, "b", "b1")
		fm.set(ra.PID, 100*mib, 30*mib)
		fm.set(rb.PID, 100*mib, 30*mib)
		sampled()
		mustSubmit(t, s, "b", "b2") // a is now the least recently used
		tot := s.Status().Totals
		if tot.MemoryBudgetBytes != 250*mib || tot.MeasuredPSSBytes != 200*mib || tot.ChargedBytes != 200*mib || tot.ChildEstimateBytes != 100*mib {
			t.Fatalf("budget totals: %+v", tot)
		}

		// 200 MiB measured + 100 MiB for one more child > 250 MiB: c needs a's room.
		mustSubmit(t, s, "c", "c1")
		synctest.Wait()
		if !w.child(0).isDead() || w.child(1).isDead() {
			t.Fatalf("want a's child (LRU) evicted, b's kept: a dead=%v b dead=%v", w.child(0).isDead(), w.child(1).isDead())
		}
		tot = s.Status().Totals
		if tot.Live != 2 || tot.Retired[ReasonEvicted] != 1 {
			t.Fatalf("totals after c: %+v", tot)
		}

		// a comes back: b's child is now the least recently used and goes for it.
		r := mustSubmit(t, s, "a", "a2")
		if r.Text != "reply #2: a2" || r.ThreadID != ra.ThreadID || r.PID == ra.PID {
			t.Fatalf("a after eviction: %+v (first child %d, thread %s)", r, ra.PID, ra.ThreadID)
		}
		synctest.Wait()
		if !w.child(1).isDead() || s.Status().Totals.Retired[ReasonEvicted] != 2 {
			t.Fatalf("b's child not evicted for a: dead=%v totals %+v", w.child(1).isDead(), s.Status().Totals)
		}
		if w.maxAlive > 3 {
			t.Fatalf("%d children alive at once, budget allows 2 (+1 retiring)", w.maxAlive)
		}
	})
}

// TestBudgetWaitsThenNoSlot: with the budget full of busy children nothing can be evicted; a
// new chat waits for SlotWait and is refused with ErrNoSlot, and one that waits while a turn ends
// gets the room of the child that went idle.
func TestBudgetWaitsThenNoSlot(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w, fm := newFakeWorld(), newFakeMem()
		s := newBudgetSup(t, w, fm, func(c *Config) {
			c.MaxChildren = 8
			c.MemoryBudget = 250 * mib
			c.SlotWait = 30 * time.Second
		})
		defer shutdown(t, s)
		ctx := context.Background()
		a := submitAsync(ctx, s, "a", "block:g")
		b := submitAsync(ctx, s, "b", "block:h")
		synctest.Wait()
		aPID := row(t, s, "a").PID
		fm.set(aPID, 100*mib, 30*mib)
		fm.set(row(t, s, "b").PID, 100*mib, 30*mib)
		sampled()

		start := time.Now()
		_, err := s.Submit(ctx, "c", "c1")
		if !errors.Is(err, ErrNoSlot) {
			t.Fatalf("c: err = %v, want ErrNoSlot", err)
		}
		if d := time.Since(start); d != 30*time.Second {
			t.Fatalf("c refused after %s, want SlotWait 30s", d)
		}
		if w.spawnCount() != 2 {
			t.Fatalf("spawns %d, want 2: the budget had no room for c", w.spawnCount())
		}

		d := submitAsync(ctx, s, "d", "d1")
		synctest.Wait()
		if tot := s.Status().Totals; d.finished() || tot.WaitingForSlot != 1 || tot.Live != 2 {
			t.Fatalf("want d waiting: finished=%v totals %+v", d.finished(), tot)
		}
		w.open("g") // a's turn ends: its idle child is evicted for d
		if _, err := a.wait(); err != nil {
			t.Fatal(err)
		}
		if r, err := d.wait(); err != nil || r.Text != "reply #1: d1" {
			t.Fatalf("d: %+v %v", r, err)
		}
		if a := s.Status().Children[0]; a.ChatKey == "a" || s.Status().Totals.Retired[ReasonEvicted] != 1 {
			t.Fatalf("a's child (pid %d) not evicted for d: %+v", aPID, s.Status())
		}
		w.open("h")
		if _, err := b.wait(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestBudgetEstimateLearned: a child not measured yet is charged the estimate (the seed before
// any child ran a turn); the measured PSS replaces it at the next sample, and the estimate becomes
// the mean PSS of the measured children that ran a turn.
func TestBudgetEstimateLearned(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w, fm := newFakeWorld(), newFakeMem()
		budget := int64(3*DefaultChildEstimate + 10*mib)
		s := newBudgetSup(t, w, fm, func(c *Config) { c.MaxChildren = 8; c.MemoryBudget = budget })
		defer shutdown(t, s)
		ctx := context.Background()
		var busy []*pending
		for _, k := range []string{"a", "b", "c"} {
			busy = append(busy, submitAsync(ctx, s, k, "block:"+k))
		}
		synctest.Wait()
		tot := s.Status().Totals
		if tot.ChildEstimateBytes != DefaultChildEstimate || tot.ChargedBytes != 3*DefaultChildEstimate || tot.MeasuredPSSBytes != 0 {
			t.Fatalf("before any sample: %+v", tot)
		}
		// Three unmeasured children at the seed leave no room for a fourth.
		d := submitAsync(ctx, s, "d", "block:d")
		synctest.Wait()
		if d.finished() || w.spawnCount() != 3 || s.Status().Totals.WaitingForSlot != 1 {
			t.Fatalf("d started on unmeasured room: spawns %d, totals %+v", w.spawnCount(), s.Status().Totals)
		}
		// Measured, the three are small: the sample makes room for d.
		for i, pss := range []int64{10 * mib, 20 * mib, 30 * mib} {
			fm.set(w.child(i).pid, pss, pss/2)
		}
		sampled()
		if w.spawnCount() != 4 || s.Status().Totals.WaitingForSlot != 0 {
			t.Fatalf("d still waits after the sample: spawns %d, totals %+v", w.spawnCount(), s.Status().Totals)
		}
		for i, k := range []string{"a", "b", "c"} {
			w.open(k)
			if _, err := busy[i].wait(); err != nil {
				t.Fatal(err)
			}
		}
		fm.set(w.child(3).pid, 80*mib, 40*mib) // d, still in its first turn: not in the mean
		sampled()
		tot = s.Status().Totals
		if tot.ChildEstimateBytes != 20*mib || tot.MeasuredPSSBytes != 140*mib || tot.ChargedBytes != 140*mib {
			t.Fatalf("learned: estimate %d MiB, measured %d MiB, charged %d MiB; want 20, 140, 140 (totals %+v)",
				tot.ChildEstimateBytes/mib, tot.MeasuredPSSBytes/mib, tot.ChargedBytes/mib, tot)
		}
		// 140 + 20 fits 169: e starts without evicting anyone (with the seed, 140 + 53 would not).
		mustSubmit(t, s, "e", "e1")
		if got := s.Status().Totals; got.Live != 5 || got.Retired[ReasonEvicted] != 0 {
			t.Fatalf("e: totals %+v", got)
		}
		w.open("d")
		if _, err := d.wait(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestRecycleIdleOnMemory: an idle child whose private memory grows past ChildMemoryLimit is
// retired at the next sample with reason memory; the chat's next message resumes its thread in a
// new child, and the recycle is not counted as a restart.
func TestRecycleIdleOnMemory(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w, fm := newFakeWorld(), newFakeMem()
		s := newBudgetSup(t, w, fm, func(c *Config) { c.ChildMemoryLimit = 500 * mib })
		defer shutdown(t, s)
		r1 := mustSubmit(t, s, "a", "one")
		fm.set(r1.PID, 450*mib, 400*mib)
		sampled()
		if w.child(0).isDead() {
			t.Fatal("retired below the limit")
		}
		fm.set(r1.PID, 650*mib, 600*mib) // it grew
		sampled()
		if !w.child(0).isDead() {
			t.Fatal("idle child past the memory limit was not retired")
		}
		if tot := s.Status().Totals; tot.Live != 0 || tot.Retired[ReasonMemory] != 1 {
			t.Fatalf("totals %+v", tot)
		}
		r2 := mustSubmit(t, s, "a", "two")
		if r2.Text != "reply #2: two" || r2.ThreadID != r1.ThreadID || r2.PID == r1.PID {
			t.Fatalf("after recycle: %+v (first %+v)", r2, r1)
		}
		if res := w.resumed(); !slices.Equal(res, []string{r1.ThreadID}) {
			t.Fatalf("resumes %v, want [%s]", res, r1.ThreadID)
		}
		if got := row(t, s, "a").Restarts; got != 0 {
			t.Fatalf("recycle counted as a restart: %d", got)
		}
	})
}

// TestRecycleBusyAfterTurn: a busy child past the limit finishes its turn, whose reply is good,
// and is retired then; the next message resumes the thread in a new child.
func TestRecycleBusyAfterTurn(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w, fm := newFakeWorld(), newFakeMem()
		s := newBudgetSup(t, w, fm, func(c *Config) { c.ChildMemoryLimit = 500 * mib })
		defer shutdown(t, s)
		p := submitAsync(context.Background(), s, "a", "block:g")
		synctest.Wait()
		fm.set(w.child(0).pid, 650*mib, 600*mib)
		sampled()
		if w.child(0).isDead() || p.finished() {
			t.Fatal("busy child retired mid-turn")
		}
		w.open("g")
		r1, err := p.wait()
		if err != nil || r1.Text != "reply #1: block:g" {
			t.Fatalf("turn of the bloated child: %+v %v", r1, err)
		}
		synctest.Wait()
		if !w.child(0).isDead() || s.Status().Totals.Retired[ReasonMemory] != 1 {
			t.Fatalf("bloated child not retired after its turn: dead=%v totals %+v", w.child(0).isDead(), s.Status().Totals)
		}
		r2 := mustSubmit(t, s, "a", "two")
		if r2.Text != "reply #2: two" || r2.ThreadID != r1.ThreadID || w.spawnCount() != 2 {
			t.Fatalf("after recycle: %+v, spawns %d", r2, w.spawnCount())
		}
	})
}

// TestRecycleMaxTurns: a child that ran ChildMaxTurns turns is retired as its last turn ends.
func TestRecycleMaxTurns(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w, fm := newFakeWorld(), newFakeMem()
		s := newBudgetSup(t, w, fm, func(c *Config) { c.ChildMaxTurns = 2 })
		defer shutdown(t, s)
		r1 := mustSubmit(t, s, "a", "one")
		mustSubmit(t, s, "a", "two")
		synctest.Wait()
		if !w.child(0).isDead() || s.Status().Totals.Retired[ReasonMaxTurns] != 1 {
			t.Fatalf("child not retired after 2 turns: dead=%v totals %+v", w.child(0).isDead(), s.Status().Totals)
		}
		r3 := mustSubmit(t, s, "a", "three")
		if r3.Text != "reply #3: three" || r3.ThreadID != r1.ThreadID || w.spawnCount() != 2 {
			t.Fatalf("after recycle: %+v, spawns %d", r3, w.spawnCount())
		}
		if w.child(1).isDead() {
			t.Fatal("the new child was retired after its first turn")
		}
	})
}

// TestRecycleMaxAge: an idle child older than ChildMaxAge is retired at a sample; a busy one
// when its turn ends.
func TestRecycleMaxAge(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w, fm := newFakeWorld(), newFakeMem()
		s := newBudgetSup(t, w, fm, func(c *Config) { c.ChildMaxAge = time.Hour; c.IdleTTL = -1; c.TurnDeadline = -1 })
		defer shutdown(t, s)
		r1 := mustSubmit(t, s, "a", "one")
		time.Sleep(time.Hour - sampleEvery)
		synctest.Wait()
		if w.child(0).isDead() {
			t.Fatal("retired before its max age")
		}
		time.Sleep(sampleEvery)
		synctest.Wait()
		if !w.child(0).isDead() || s.Status().Totals.Retired[ReasonMaxAge] != 1 {
			t.Fatalf("idle child past its max age not retired: dead=%v totals %+v", w.child(0).isDead(), s.Status().Totals)
		}
		if r := mustSubmit(t, s, "a", "two"); r.ThreadID != r1.ThreadID || r.Text != "reply #2: two" {
			t.Fatalf("after recycle: %+v", r)
		}

		p := submitAsync(context.Background(), s, "b", "block:g")
		synctest.Wait()
		time.Sleep(time.Hour + sampleEvery)
		synctest.Wait()
		if w.child(2).isDead() || p.finished() {
			t.Fatal("busy child retired mid-turn for its age")
		}
		w.open("g")
		if _, err := p.wait(); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if !w.child(2).isDead() || s.Status().Totals.Retired[ReasonMaxAge] != 3 {
			// a's second child is past its age by now too.
			t.Fatalf("old busy child not retired after its turn: dead=%v totals %+v", w.child(2).isDead(), s.Status().Totals)
		}
	})
}

// TestStatusMemoryFromReader: the status rows and totals read memory through Config.Memory.
func TestStatusMemoryFromReader(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w, fm := newFakeWorld(), newFakeMem()
		s := newBudgetSup(t, w, fm, func(c *Config) { c.MemoryBudget = 4 << 30 })
		defer shutdown(t, s)
		r := mustSubmit(t, s, "a", "one")
		fm.set(r.PID, 60*mib, 25*mib)
		st := s.Status()
		if c := st.Children[0]; c.PSSBytes != 60*mib || c.USSBytes != 25*mib || c.RSSBytes != 150*mib {
			t.Fatalf("row %+v", c)
		}
		if st.Totals.PSSBytes != 60*mib || st.Totals.MemoryBudgetBytes != 4<<30 {
			t.Fatalf("totals %+v", st.Totals)
		}
	})
}

// TestStatusMemoryFromSampler: once the sampler has read a child, Status shows that reading and
// reads no /proc file for it (a metrics scrape costs no smaps_rollup per child); the next sample
// brings the new figures.
func TestStatusMemoryFromSampler(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w, fm := newFakeWorld(), newFakeMem()
		var mu sync.Mutex
		reads := 0
		s := newBudgetSup(t, w, fm, func(c *Config) {
			c.Memory = func(pid int) (childproc.Memory, error) {
				mu.Lock()
				reads++
				mu.Unlock()
				return fm.read(pid)
			}
		})
		defer shutdown(t, s)
		r := mustSubmit(t, s, "a", "one")
		fm.set(r.PID, 60*mib, 25*mib)
		sampled()
		fm.set(r.PID, 80*mib, 30*mib)
		mu.Lock()
		before := reads
		mu.Unlock()
		for range 3 {
			if c := s.Status().Children[0]; c.PSSBytes != 60*mib || c.USSBytes != 25*mib || c.RSSBytes != 150*mib {
				t.Fatalf("row %+v, want the sampled reading", c)
			}
		}
		mu.Lock()
		if reads != before {
			t.Errorf("Status read the memory of a sampled child %d times", reads-before)
		}
		mu.Unlock()
		sampled()
		if st := s.Status(); st.Children[0].PSSBytes != 80*mib || st.Totals.PSSBytes != 80*mib {
			t.Fatalf("after the next sample: row %+v totals %+v", st.Children[0], st.Totals)
		}
	})
}

func TestMemoryConfig(t *testing.T) {
	t.Parallel()
	s, err := New(Config{Spawn: newFakeWorld().spawn})
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, s)
	avail, err := childproc.ProcFS{}.MemAvailable()
	if err != nil {
		t.Fatal(err)
	}
	// MemAvailable moves while other processes run; the default is half of it at New.
	if b := s.cfg.MemoryBudget; b <= 0 || b > avail {
		t.Errorf("default MemoryBudget %d, want about half of MemAvailable %d", b, avail)
	}
	if s.cfg.MaxChildren != DefaultMaxChildren || s.cfg.MemorySampleInterval != DefaultMemorySampleInterval {
		t.Errorf("defaults: MaxChildren %d, MemorySampleInterval %s", s.cfg.MaxChildren, s.cfg.MemorySampleInterval)
	}
	if _, err := MemoryBudgetOf(1.5); err == nil {
		t.Error("MemoryBudgetOf(1.5) accepted")
	}
	for _, bad := range []Config{{ChildMemoryLimit: -1}, {ChildMaxAge: -time.Second}, {ChildMaxTurns: -1}} {
		bad.Spawn = newFakeWorld().spawn
		if s, err := New(bad); err == nil {
			shutdown(t, s)
			t.Errorf("New accepted %+v", bad)
		}
	}
	off, err := New(Config{Spawn: newFakeWorld().spawn, MemoryBudget: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, off)
	if got := off.Status().Totals.MemoryBudgetBytes; got != 0 {
		t.Errorf("no budget shows as %d", got)
	}
}
