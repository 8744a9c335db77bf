package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/atomicfile"
)

// ChildRecord identifies one live child in ChildrenFile. StartTime makes the record safe against
// pid reuse: a process with the same pid but another start time is a stranger.
type ChildRecord struct {
	PID int `json:"pid"`
	// StartTime is field 22 of /proc/<pid>/stat: clock ticks after boot.
	StartTime uint64 `json:"start_time"`
	// Exe is /proc/<pid>/exe at spawn, when readable.
	Exe string `json:"exe,omitempty"`
	// PGID and SID are the child's process group and session at spawn. appserver starts
	// children as the leaders of both (pgid == sid == pid), so that after the child died the
	// sweep still finds what it left running: tools in its group, and MCP servers, which codex
	// starts in process groups of their own within its session.
	PGID    int    `json:"pgid,omitempty"`
	SID     int    `json:"sid,omitempty"`
	ChatKey string `json:"chat_key,omitempty"`
}

// childrenFile is the content of ChildrenFile.
type childrenFile struct {
	DaemonPID int           `json:"daemon_pid"`
	BootID    string        `json:"boot_id,omitempty"`
	Written   time.Time     `json:"written"`
	Children  []ChildRecord `json:"children"`
}

// Sweep actions reported in SweptChild.Action.
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
	// be confirmed; it was left alone (SweptChild.Reason says why).
	SweepUnverified = "unverified"
)

// SweptChild is what the boot sweep did about one recorded child.
type SweptChild struct {
	ChildRecord
	Action string
	// Reason says why the record's process, or what it left in its group or session, was left
	// alone.
	Reason string
	// Remains counts the processes left in the child's group or session that were killed.
	Remains int
}

// procIdentity is what a child's record needs from /proc.
type procIdentity struct {
	start   uint64
	exe     string
	pgrp    int
	session int
}

// readProcIdentity reads pid's start time and executable; zero when pid is not a process of this
// machine (an in-memory test child).
func readProcIdentity(pid int) procIdentity {
	if pid <= 0 {
		return procIdentity{}
	}
	st, err := readProcStat(pid)
	if err != nil {
		return procIdentity{}
	}
	exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	return procIdentity{start: st.start, exe: exe, pgrp: st.pgrp, session: st.session}
}

type procStat struct {
	state   byte
	pgrp    int
	session int
	start   uint64
}

// readBootID returns the kernel's id of this boot, "" when unknown. Start times count clock ticks
// since boot, so a record of another boot identifies nothing.
func readBootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// readProcStat parses /proc/<pid>/stat. The command name (field 2) may hold spaces and
// parentheses, so fields are counted from the last ')'.
func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(b)
}

func parseProcStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, errors.New("malformed /proc stat: no ')'")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state), f[2] field 5 (pgrp), f[3] field 6 (session), f[19] field 22
	// (starttime).
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("malformed /proc stat: %d fields after comm", len(f))
	}
	pgrp, err := strconv.Atoi(f[2])
	if err != nil {
		return procStat{}, fmt.Errorf("malformed /proc stat pgrp: %w", err)
	}
	session, err := strconv.Atoi(f[3])
	if err != nil {
		return procStat{}, fmt.Errorf("malformed /proc stat session: %w", err)
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("malformed /proc stat starttime: %w", err)
	}
	return procStat{state: f[0][0], pgrp: pgrp, session: session, start: start}, nil
}

// persistRecords writes ChildrenFile, logging a failure: a missing record costs at most an
// orphan after a crash, which is no reason to fail a turn.
func (s *Supervisor) persistRecords() {
	if err := s.writeRecords(); err != nil {
		s.log.Error("writing children record failed", zap.Error(err))
	}
}

// writeRecords atomically replaces ChildrenFile with the children alive now plus leftover
// orphans. recMu makes the writes follow each other, each one reading the pool when it starts,
// so the file ends with the newest state.
func (s *Supervisor) writeRecords() error {
	if s.cfg.StateDir == "" {
		return nil
	}
	s.recMu.Lock()
	defer s.recMu.Unlock()
	f := childrenFile{DaemonPID: os.Getpid(), BootID: s.bootID, Written: time.Now().UTC(), Children: []ChildRecord{}}
	f.Children = append(f.Children, s.leftover...)
	s.mu.Lock()
	for sess := range s.sessions {
		if sess.proc.start != 0 {
			f.Children = append(f.Children, ChildRecord{PID: sess.pid, StartTime: sess.proc.start,
				Exe: sess.proc.exe, PGID: sess.proc.pgrp, SID: sess.proc.session, ChatKey: sess.key.key})
		}
	}
	s.mu.Unlock()
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("encode children record: %w", err)
	}
	return atomicfile.WriteFile(filepath.Join(s.cfg.StateDir, ChildrenFile), append(b, '\n'), atomicfile.Options{})
}

// SweepOrphans terminates the children recorded in stateDir/ChildrenFile by a daemon that is no
// longer running them (it was SIGKILLed or crashed; its children were reparented and cannot be
// waited for). A recorded pid is signalled only when a process with that pid still has the
// recorded start time and executable, so a reused pid is never touched; one whose executable
// cannot be confirmed is left alone and reported as SweepUnverified.
// Each orphan's process group gets SIGTERM, then after grace SIGKILL; the sweep polls /proc until
// they are gone, at most about 2×grace, and honours ctx. Then what each recorded child left in
// its process group and session is killed (see sweepRemains), also when the child itself was
// already gone, as after a parent-death signal. It logs and returns what it did. A missing file
// is not an error.
func SweepOrphans(ctx context.Context, stateDir string, grace time.Duration, logger *zap.Logger) ([]SweptChild, error) {
	if logger == nil {
		logger = zap.NewNop()
	}
	if grace <= 0 {
		grace = DefaultSweepGrace
	}
	path := filepath.Join(stateDir, ChildrenFile)
	// Never through a symbolic link: a planted record would choose the processes signalled.
	b, err := atomicfile.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("boot sweep: %w", err)
	}
	var f childrenFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("boot sweep: %s is corrupt, orphans it listed are not swept: %w", path, err)
	}
	out := make([]SweptChild, len(f.Children))
	ours := make([]bool, len(f.Children)) // verified live at the start of the sweep
	var live []int                        // indexes into out
	for i, rec := range f.Children {
		out[i] = SweptChild{ChildRecord: rec, Action: SweepGone}
		switch st, ok, why := checkRecorded(rec); {
		case why != "":
			out[i].Action, out[i].Reason = SweepUnverified, why
			continue
		case !ok:
			continue
		case rec.PGID == 0 && rec.SID == 0:
			// A record of an older daemon: the child is verified, so its ids now are its own.
			out[i].PGID, out[i].SID = st.pgrp, st.session
		}
		ours[i] = true
		live = append(live, i)
		out[i].Action = SweepTerminated
		signalChild(rec.PID, syscall.SIGTERM)
	}
	if len(live) > 0 {
		live = waitGone(ctx, out, live, grace)
		for _, i := range live {
			out[i].Action = SweepKilled
			signalChild(out[i].PID, syscall.SIGKILL)
		}
		live = waitGone(ctx, out, live, grace)
		for _, i := range live {
			out[i].Action = SweepSurvived
		}
	}
	sameBoot := f.BootID != "" && f.BootID == readBootID()
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
			out[i].Remains, out[i].Reason = sweepRemains(ctx, out[i].ChildRecord, grace)
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

// runsAsRecorded reports whether a process with rec's pid and start time is running (not a
// zombie). It says nothing about whether that process is a codex child: see checkRecorded.
func runsAsRecorded(rec ChildRecord) bool {
	if rec.PID <= 0 || rec.StartTime == 0 {
		return false
	}
	st, err := readProcStat(rec.PID)
	return err == nil && st.state != 'Z' && st.start == rec.StartTime
}

// checkRecorded reports whether rec's child still runs: ok when a process with its pid and
// start time runs and its executable is the recorded one; st is that process's /proc stat. When
// pid and start time match but the executable cannot be confirmed (the record has none,
// /proc/<pid>/exe cannot be read, or it names another file), why says so: such a process is
// left alone, because signalling a stranger is worse than leaving an orphan.
func checkRecorded(rec ChildRecord) (st procStat, ok bool, why string) {
	if rec.PID <= 0 || rec.StartTime == 0 {
		return procStat{}, false, ""
	}
	st, err := readProcStat(rec.PID)
	if err != nil || st.state == 'Z' || st.start != rec.StartTime {
		return procStat{}, false, ""
	}
	if rec.Exe == "" {
		return st, false, "pid and start time match but the record names no executable to confirm it"
	}
	exe, err := os.Readlink("/proc/" + strconv.Itoa(rec.PID) + "/exe")
	if err != nil {
		return st, false, fmt.Sprintf("pid and start time match but its executable cannot be read: %v", err)
	}
	if strings.TrimSuffix(exe, " (deleted)") != strings.TrimSuffix(rec.Exe, " (deleted)") {
		return st, false, fmt.Sprintf("pid and start time match but its executable is %s, not the recorded %s", exe, rec.Exe)
	}
	return st, true, ""
}

// remain is a process found in a dead child's process group or session.
type remain struct {
	pid   int
	start uint64
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
func sweepRemains(ctx context.Context, rec ChildRecord, grace time.Duration) (killed int, why string) {
	byGroup, bySession := rec.PGID > 0 && rec.PGID == rec.PID, rec.SID > 0 && rec.SID == rec.PID
	if !byGroup && !bySession {
		return 0, ""
	}
	if st, err := readProcStat(rec.PID); err == nil && st.start != rec.StartTime {
		return 0, fmt.Sprintf("pid %d now belongs to another process, which owns its process group and session ids: not swept", rec.PID)
	}
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	self := os.Getpid()
	signalled := map[int]bool{}
	for {
		var left []remain
		for _, r := range listProcs() {
			if r.pid == self || r.st.state == 'Z' {
				continue
			}
			if (byGroup && r.st.pgrp == rec.PGID) || (bySession && r.st.session == rec.SID) {
				if r.st.start < rec.StartTime {
					return len(signalled), fmt.Sprintf("pid %d in its process group or session started before the child: the ids were reused, nothing more was signalled", r.pid)
				}
				left = append(left, remain{pid: r.pid, start: r.st.start})
			}
		}
		if len(left) == 0 {
			return len(signalled), ""
		}
		for _, r := range left {
			if killVerified(r) {
				signalled[r.pid] = true
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

// procEntry is one process in /proc.
type procEntry struct {
	pid int
	st  procStat
}

// listProcs reads the stat of every process in /proc; processes that exit meanwhile are skipped.
func listProcs() []procEntry {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make([]procEntry, 0, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		if st, err := readProcStat(pid); err == nil {
			out = append(out, procEntry{pid: pid, st: st})
		}
	}
	return out
}

// killVerified SIGKILLs r if it still is the process that was found. The pidfd behind
// os.FindProcess pins the process before its start time is read again: if the pid was reused
// in between, the check fails or the signal goes to the exited process, never to the new one.
func killVerified(r remain) bool {
	p, err := os.FindProcess(r.pid)
	if err != nil {
		return false
	}
	defer p.Release()
	if st, err := readProcStat(r.pid); err != nil || st.start != r.start {
		return false
	}
	return p.Signal(syscall.SIGKILL) == nil
}

// signalChild signals pid's process group when pid leads one (appserver starts children as
// group and session leaders), else just pid.
func signalChild(pid int, sig syscall.Signal) {
	if st, err := readProcStat(pid); err == nil && st.pgrp == pid {
		_ = syscall.Kill(-pid, sig)
		return
	}
	_ = syscall.Kill(pid, sig)
}

// waitGone polls /proc until the records at idx are gone or grace passes; it returns those still
// running.
func waitGone(ctx context.Context, out []SweptChild, idx []int, grace time.Duration) []int {
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		alive := idx[:0:0]
		for _, i := range idx {
			if runsAsRecorded(out[i].ChildRecord) {
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
