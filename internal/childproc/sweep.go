package childproc

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// Sweep actions reported in Swept.Action.
const (
	// SweepGone: no process with that pid and start time (already gone, or the pid was reused):
	// nothing was signalled.
	SweepGone = "gone"
	// SweepTerminated: the orphan exited after SIGTERM to its process group.
	SweepTerminated = "terminated"
	// SweepKilled: the orphan needed SIGKILL.
	SweepKilled = "killed"
	// SweepSurvived: the orphan was still there after SIGKILL and the grace; its record is kept.
	SweepSurvived = "survived"
	// SweepUnverified: a process with that pid and start time runs, but its executable could not
	// be confirmed; it was left alone (Swept.Reason says why).
	SweepUnverified = "unverified"
)

// Swept is what the boot sweep did about one recorded child.
type Swept struct {
	Record
	Action string
	// Reason says why the record's process, or what it left in its group or session, was left
	// alone.
	Reason string
	// Remains counts the processes left in the child's group or session that were killed.
	Remains int
}

// Sweep terminates the children listed in the record file at path by a daemon that is no longer
// running them (it was SIGKILLed or crashed; its children were reparented and cannot be waited
// for). A recorded pid is signalled only when a process with that pid still has the recorded
// start time and executable, so a reused pid is never touched; one whose executable cannot be
// confirmed is left alone and reported as SweepUnverified.
// Each orphan's process group gets SIGTERM, then after grace SIGKILL; the sweep polls /proc until
// they are gone, at most about 2×grace, and honours ctx. Then what each recorded child left in
// its process group and session is killed (see sweepRemains), also when the child itself was
// already gone, as after a parent-death signal. It logs (logger may be nil) and returns what it
// did. A missing file is not an error.
func Sweep(ctx context.Context, path string, grace time.Duration, logger *zap.Logger) ([]Swept, error) {
	return SweepKeep(ctx, path, grace, logger, nil)
}

// SweepKeep is Sweep that leaves alone, and does not report, the records keep reports true for:
// children this process still runs (it re-executed itself and adopted them). A nil keep keeps
// none.
func SweepKeep(ctx context.Context, path string, grace time.Duration, logger *zap.Logger, keep func(Record) bool) ([]Swept, error) {
	if logger == nil {
		logger = zap.NewNop()
	}
	f, ok, err := readRecordFile(path)
	if err != nil {
		return nil, fmt.Errorf("boot sweep: %w", err)
	}
	if !ok {
		return nil, nil
	}
	if keep != nil {
		f.Children = slices.DeleteFunc(f.Children, keep)
	}
	var p ProcFS
	out := make([]Swept, len(f.Children))
	ours := make([]bool, len(f.Children)) // verified live at the start of the sweep
	var live []int                        // indexes into out
	for i, rec := range f.Children {
		out[i] = Swept{Record: rec, Action: SweepGone}
		switch st, ok, why := checkRecorded(p, rec); {
		case why != "":
			out[i].Action, out[i].Reason = SweepUnverified, why
			continue
		case !ok:
			continue
		case rec.PGID == 0 && rec.SID == 0:
			// A record of an older daemon: the child is verified, so its ids now are its own.
			out[i].PGID, out[i].SID = st.PGRP, st.Session
		}
		ours[i] = true
		live = append(live, i)
		out[i].Action = SweepTerminated
		signalChild(p, rec.PID, syscall.SIGTERM)
	}
	if len(live) > 0 {
		live = waitGone(ctx, p, out, live, grace)
		for _, i := range live {
			out[i].Action = SweepKilled
			signalChild(p, out[i].PID, syscall.SIGKILL)
		}
		live = waitGone(ctx, p, out, live, grace)
		for _, i := range live {
			out[i].Action = SweepSurvived
		}
	}
	sameBoot := f.BootID != "" && f.BootID == p.BootID()
	for i := range out {
		switch {
		case out[i].Action == SweepSurvived || out[i].Action == SweepUnverified:
		case !ours[i] && !sameBoot:
			// Only a child verified alive vouches for its ids; without it, ids and start times
			// of another boot (or of a record that does not say) identify nothing.
			if f.BootID != "" {
				out[i].Reason = "recorded before the last reboot: its process group and session were not swept"
			}
		default:
			out[i].Remains, out[i].Reason = sweepRemains(ctx, p, out[i].Record, grace)
		}
	}
	for _, sc := range out {
		l := logger.Info
		switch sc.Action {
		case SweepSurvived:
			l = logger.Error
		case SweepUnverified:
			l = logger.Warn
		}
		fields := []zap.Field{zap.Int("pid", sc.PID), zap.String("chat_key", sc.ChatKey),
			zap.String("exe", sc.Exe), zap.String("action", sc.Action), zap.Int("remains_killed", sc.Remains),
			zap.Int("old_daemon_pid", f.DaemonPID)}
		if sc.Reason != "" {
			fields = append(fields, zap.String("reason", sc.Reason))
		}
		l("boot sweep: recorded child", fields...)
	}
	return out, nil
}

// RunsAsRecorded reports whether a process with rec's pid and start time is running (not a
// zombie). It says nothing about whether that process is a codex child: the sweep also checks
// the executable.
func RunsAsRecorded(rec Record) bool {
	return runsAsRecorded(ProcFS{}, rec)
}

func runsAsRecorded(p ProcFS, rec Record) bool {
	if rec.PID <= 0 || rec.StartTime == 0 {
		return false
	}
	st, err := p.Stat(rec.PID)
	return err == nil && !st.Zombie() && st.StartTime == rec.StartTime
}

// checkRecorded reports whether rec's child still runs: ok when a process with its pid and
// start time runs and its executable is the recorded one; st is that process's /proc stat. When
// pid and start time match but the executable cannot be confirmed (the record has none,
// /proc/<pid>/exe cannot be read, or it names another file), why says so: such a process is
// left alone, because signalling a stranger is worse than leaving an orphan.
func checkRecorded(p ProcFS, rec Record) (st Stat, ok bool, why string) {
	if rec.PID <= 0 || rec.StartTime == 0 {
		return Stat{}, false, ""
	}
	st, err := p.Stat(rec.PID)
	if err != nil || st.Zombie() || st.StartTime != rec.StartTime {
		return Stat{}, false, ""
	}
	if rec.Exe == "" {
		return st, false, "pid and start time match but the record names no executable to confirm it"
	}
	exe, err := p.Exe(rec.PID)
	if err != nil {
		return st, false, fmt.Sprintf("pid and start time match but its executable cannot be read: %v", err)
	}
	if strings.TrimSuffix(exe, " (deleted)") != strings.TrimSuffix(rec.Exe, " (deleted)") {
		return st, false, fmt.Sprintf("pid and start time match but its executable is %s, not the recorded %s", exe, rec.Exe)
	}
	return st, true, ""
}

// sweepRemains kills what rec's child left running in its process group and its session
// (tools, MCP servers, their children) and returns how many processes it killed, or why it
// stopped. The ids are used only when the child led them, and only while nothing suggests they
// were reused: no other process runs under the child's pid (it would own the ids now), and
// every member started no earlier than the child (a descendant cannot be older than its
// ancestor). The kernel does not hand out a group or session id again while any member lives,
// so members found this way are the child's. Each is signalled through a pidfd taken before
// its start time is checked again, so a pid reused in between is never hit. Processes that keep
// appearing (a shell loop) are swept again until none is left or grace passes.
func sweepRemains(ctx context.Context, p ProcFS, rec Record, grace time.Duration) (killed int, why string) {
	byGroup, bySession := rec.PGID > 0 && rec.PGID == rec.PID, rec.SID > 0 && rec.SID == rec.PID
	if !byGroup && !bySession {
		return 0, ""
	}
	if st, err := p.Stat(rec.PID); err == nil && st.StartTime != rec.StartTime {
		return 0, fmt.Sprintf("pid %d now belongs to another process, which owns its process group and session ids: not swept", rec.PID)
	}
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	self := os.Getpid()
	signalled := map[int]bool{}
	for {
		var left []Stat
		all, _ := p.All()
		for _, st := range all {
			if st.PID == self || st.Zombie() {
				continue
			}
			if (byGroup && st.PGRP == rec.PGID) || (bySession && st.Session == rec.SID) {
				if st.StartTime < rec.StartTime {
					return len(signalled), fmt.Sprintf("pid %d in its process group or session started before the child: the ids were reused, nothing more was signalled", st.PID)
				}
				left = append(left, st)
			}
		}
		if len(left) == 0 {
			return len(signalled), ""
		}
		for _, st := range left {
			if killVerified(p, st) {
				signalled[st.PID] = true
			}
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			return len(signalled), fmt.Sprintf("%d processes of its process group or session still ran %s after SIGKILL", len(left), grace)
		case <-ctx.Done():
			return len(signalled), fmt.Sprintf("sweep cut short with %d processes of its process group or session left: %v", len(left), context.Cause(ctx))
		}
	}
}

// killVerified SIGKILLs the process found as found if it still is that process. The pidfd behind
// os.FindProcess pins the process before its start time is read again: if the pid was reused
// in between, the check fails or the signal goes to the exited process, never to the new one.
func killVerified(p ProcFS, found Stat) bool {
	proc, err := os.FindProcess(found.PID)
	if err != nil {
		return false
	}
	defer proc.Release()
	if st, err := p.Stat(found.PID); err != nil || st.StartTime != found.StartTime {
		return false
	}
	return proc.Signal(syscall.SIGKILL) == nil
}

// signalChild signals pid's process group when pid leads one (Start makes children group and
// session leaders), else just pid.
func signalChild(p ProcFS, pid int, sig syscall.Signal) {
	if st, err := p.Stat(pid); err == nil && st.PGRP == pid {
		_ = syscall.Kill(-pid, sig)
		return
	}
	_ = syscall.Kill(pid, sig)
}

// waitGone polls /proc until the records at idx are gone or grace passes; it returns those still
// running.
func waitGone(ctx context.Context, p ProcFS, out []Swept, idx []int, grace time.Duration) []int {
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		alive := idx[:0:0]
		for _, i := range idx {
			if runsAsRecorded(p, out[i].Record) {
				alive = append(alive, i)
			}
		}
		idx = alive
		if len(idx) == 0 {
			return nil
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			return idx
		case <-ctx.Done():
			return idx
		}
	}
}
