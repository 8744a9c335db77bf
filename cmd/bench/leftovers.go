package main

import (
	"fmt"
	"os"
)

// leftoverProc is a process the bench started (directly or through the daemon) that is still
// running when the bench ends.
type leftoverProc struct {
	PID  int
	Comm string
}

// findLeftovers lists live processes other than this one whose environment carries a CODEX_HOME
// under the bench workspace (every codex and node wrapper the bench starts, directly or through
// the daemon) or the bench's marker (the daemon, the mock model, the scale worker): nothing else
// does. Zombies hold no resources and are not reported.
func findLeftovers(ws *workspace) ([]leftoverProc, int, error) {
	procs, err := allProcs()
	if err != nil {
		return nil, 0, err
	}
	self := os.Getpid()
	home, marker := ws.codexHomeEnvPrefix(), ws.markerEnv()
	var out []leftoverProc
	for _, p := range procs {
		if p.PID == self || p.State == 'Z' {
			continue
		}
		if procEnvHas(p.PID, home) || procEnvHas(p.PID, marker) {
			out = append(out, leftoverProc{PID: p.PID, Comm: p.Comm})
		}
	}
	return out, len(procs), nil
}

// checkLeftovers reports leftovers and kills them, so a failed check does not also leak memory.
// It returns the number found.
func (b *bench) checkLeftovers() (int, string) {
	left, scanned, err := findLeftovers(b.ws)
	if err != nil {
		return -1, fmt.Sprintf("check: could not scan processes: %v", err)
	}
	if len(left) == 0 {
		return 0, fmt.Sprintf("check: no codex process started by the bench remains (%d processes scanned)", scanned)
	}
	var tree []procStat
	for _, l := range left {
		if st, err := readProcStat(l.PID); err == nil {
			tree = append(tree, st)
		}
	}
	killSurvivors(tree)
	msg := fmt.Sprintf("check: FAILED: %d processes started by the bench were still running (killed now):", len(left))
	for _, l := range left {
		msg += fmt.Sprintf(" %d(%s)", l.PID, l.Comm)
	}
	return len(left), msg
}
