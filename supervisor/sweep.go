package supervisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/childproc"
)

// childRecords is what ChildrenFile is written from besides the live children.
type childRecords struct {
	mu       sync.Mutex         // serializes the writes so the last write is the newest
	leftover []childproc.Record // orphans the boot sweep could not kill; kept for the next sweep
	bootID   string             // this boot's id, written beside the start times
}

// boot names this boot, written beside the start times.
func (r *childRecords) boot(id string) { r.bootID = id }

// keep adds an orphan the boot sweep could not kill, for the next sweep.
func (r *childRecords) keep(rec childproc.Record) { r.leftover = append(r.leftover, rec) }

// persistRecords writes ChildrenFile, logging a failure: a missing record costs at most an
// orphan after a crash, which is no reason to fail a turn.
func (s *Supervisor) persistRecords() {
	if err := s.writeRecords(); err != nil {
		s.log.Error("writing children record failed", zap.Error(err))
	}
}

// writeRecords atomically replaces ChildrenFile with the children alive now plus leftover
// orphans. records.mu makes the writes follow each other, each one reading the pool when it starts,
// so the file ends with the newest state.
func (s *Supervisor) writeRecords() error {
	if s.cfg.StateDir == "" {
		return nil
	}
	s.records.mu.Lock()
	defer s.records.mu.Unlock()
	f := childproc.RecordFile{DaemonPID: os.Getpid(), BootID: s.records.bootID, Written: time.Now().UTC()}
	f.Children = append(f.Children, s.records.leftover...)
	s.mu.Lock()
	seen := make(map[int]bool, len(s.sessions))
	for sess := range s.sessions {
		if sess.proc.StartTime != 0 && !seen[sess.proc.PID] {
			// A shared child is recorded once, under the first chat found in it.
			seen[sess.proc.PID] = true
			f.Children = append(f.Children, childproc.RecordOf(sess.proc, sess.key.key))
		}
	}
	s.mu.Unlock()
	if err := childproc.WriteRecordFile(filepath.Join(s.cfg.StateDir, ChildrenFile), f); err != nil {
		return fmt.Errorf("write children record: %w", err)
	}
	return nil
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
