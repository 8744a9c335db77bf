package supervisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/childproc"
)

// childRecords is what ChildrenFile is written from besides the live children.
type childRecords struct {
	mu       sync.Mutex         // serializes the writes so the last write is the newest
	leftover []childproc.Record // orphans the boot sweep could not kill; kept for the next sweep
	bootID   string             // this boot's id, written beside the start times
}

// bootSweep ends the children a daemon that died left (SweepOrphans), but for those the previous
// image handed over (adopted), and keeps the ones that survived it for the next sweep. It can
// take up to about 2×SweepGrace.
func (p *pool) bootSweep(adopted []AdoptedChild) {
	bootID := childproc.ProcFS{}.BootID()
	ctx, cancel := context.WithTimeout(context.Background(), 3*p.cfg.SweepGrace+time.Second)
	keep := make(map[int]bool, len(adopted))
	for _, a := range adopted {
		keep[a.Child.PID()] = true
	}
	swept, err := sweepOrphansKeeping(ctx, p.cfg.StateDir, p.cfg.SweepGrace, p.log, keep)
	cancel()
	if err != nil {
		// Not fatal: a daemon that cannot read its old record still serves; the record is
		// rewritten below and the error says what was lost.
		p.log.Error("boot sweep failed", zap.Error(err))
	}
	var leftover []childproc.Record
	for _, sc := range swept {
		if sc.Action == childproc.SweepSurvived {
			leftover = append(leftover, sc.Record)
		}
	}
	p.records.boot(bootID, leftover)
}

// boot records this boot's id and the orphans the boot sweep could not kill. It runs in New,
// before any write.
func (r *childRecords) boot(id string, leftover []childproc.Record) {
	r.bootID = id
	r.leftover = append(r.leftover, leftover...)
}

// write replaces path with the leftover orphans and live, the live children's rows, read when
// the write begins: the writes follow each other, so the file ends with the newest state.
func (r *childRecords) write(path string, live func() []childproc.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := childproc.RecordFile{DaemonPID: os.Getpid(), BootID: r.bootID, Written: time.Now().UTC()}
	f.Children = append(f.Children, r.leftover...)
	f.Children = append(f.Children, live()...)
	return childproc.WriteRecordFile(path, f)
}

// persistRecords writes ChildrenFile, logging a failure: a missing record costs at most an
// orphan after a crash, which is no reason to fail a turn.
func (p *pool) persistRecords() {
	if err := p.writeRecords(); err != nil {
		p.log.Error("writing children record failed", zap.Error(err))
	}
}

// writeRecords atomically replaces ChildrenFile with the children alive now plus leftover
// orphans. records.mu makes the writes follow each other, each one reading the pool when it starts,
// so the file ends with the newest state.
func (p *pool) writeRecords() error {
	if p.cfg.StateDir == "" {
		return nil
	}
	live := func() (rows []childproc.Record) {
		p.st.do(func(t *table) { rows = t.records() })
		return rows
	}
	if err := p.records.write(filepath.Join(p.cfg.StateDir, ChildrenFile), live); err != nil {
		return fmt.Errorf("write children record: %w", err)
	}
	return nil
}

// records are children.json's rows of the live children, one per process.
func (t *table) records() []childproc.Record {
	var out []childproc.Record
	seen := make(map[int]bool, len(t.sessions))
	for sess := range t.sessions {
		if sess.proc.StartTime != 0 && !seen[sess.proc.PID] {
			seen[sess.proc.PID] = true
			out = append(out, childproc.RecordOf(sess.proc, sess.key.key))
		}
	}
	return out
}

// SweepOrphans runs the boot sweep (childproc.Sweep) over stateDir/ChildrenFile: it ends the
// children, and what they left in their process groups and sessions, of a daemon that no longer
// runs them. A grace <= 0 means DefaultSweepGrace.
func SweepOrphans(ctx context.Context, stateDir string, grace time.Duration, logger *zap.Logger) ([]childproc.Swept, error) {
	if grace <= 0 {
		grace = DefaultSweepGrace
	}
	return childproc.Sweep(ctx, filepath.Join(stateDir, ChildrenFile), grace, logger)
}

// sweepOrphansKeeping is SweepOrphans that leaves the children of pids alone: they were handed
// over by the previous image of this process (Config.Adopted).
func sweepOrphansKeeping(ctx context.Context, stateDir string, grace time.Duration, logger *zap.Logger, pids map[int]bool) ([]childproc.Swept, error) {
	if grace <= 0 {
		grace = DefaultSweepGrace
	}
	return childproc.SweepKeep(ctx, filepath.Join(stateDir, ChildrenFile), grace, logger,
		func(r childproc.Record) bool { return pids[r.PID] })
}
