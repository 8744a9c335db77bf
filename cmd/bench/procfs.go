package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/molecule-ai/codex-warm/internal/childproc"
)

// procStat is one process as the bench reads it: the project's one /proc reader's stat.
type procStat = childproc.Stat

// readProcStat reads /proc/<pid>/stat.
func readProcStat(pid int) (procStat, error) {
	return childproc.ProcFS{}.Stat(pid)
}

// readRSS returns pid's resident set size in bytes.
func readRSS(pid int) (int64, error) {
	st, err := readProcStat(pid)
	if err != nil {
		return 0, err
	}
	if st.Zombie() {
		return 0, fmt.Errorf("pid %d is a zombie: it holds no memory", pid)
	}
	return st.RSSBytes, nil
}

// allProcs reads the stat of every process visible in /proc. Processes that exit while it reads
// are skipped.
func allProcs() ([]procStat, error) {
	return childproc.ProcFS{}.All()
}

// descendants returns root and every process below it in the ppid tree of procs, root first.
// A root missing from procs yields nil.
func descendants(procs []procStat, root int) []procStat {
	children := make(map[int][]procStat)
	var rootStat *procStat
	for i := range procs {
		p := procs[i]
		if p.PID == root {
			rootStat = &procs[i]
		}
		children[p.PPID] = append(children[p.PPID], p)
	}
	if rootStat == nil {
		return nil
	}
	out := []procStat{*rootStat}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i].PID]...)
	}
	return out
}

// treeCPU is the CPU time used so far by root and all its descendants (live ones, and through
// the c-fields the reaped ones).
func treeCPU(root int, tick time.Duration) (time.Duration, error) {
	procs, err := allProcs()
	if err != nil {
		return 0, err
	}
	tree := descendants(procs, root)
	if len(tree) == 0 {
		return 0, fmt.Errorf("cpu of process tree: pid %d not found", root)
	}
	var ticks uint64
	for _, p := range tree {
		ticks += p.CPUTicks()
	}
	return time.Duration(ticks) * tick, nil
}

// treeRSS is the summed resident set size of root and all its live descendants. Shared pages
// count once per process, as ps would show them.
func treeRSS(root int) (total int64, n int, err error) {
	procs, err := allProcs()
	if err != nil {
		return 0, 0, err
	}
	tree := descendants(procs, root)
	if len(tree) == 0 {
		return 0, 0, fmt.Errorf("rss of process tree: pid %d not found", root)
	}
	for _, p := range tree {
		if p.Zombie() {
			continue // exited: holds no memory
		}
		total += p.RSSBytes
		n++
	}
	return total, n, nil
}

// procEnvHas reports whether pid's environment holds a variable whose "NAME=value" text starts
// with prefix. Unreadable environments (other users, exited processes) report false.
func procEnvHas(pid int, prefix string) bool {
	env, err := childproc.ProcFS{}.Environ(pid)
	if err != nil {
		return false
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, prefix) {
			return true
		}
	}
	return false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// treeMem is the memory of a daemon and the processes below it (its codex children).
type treeMem struct {
	RootRSS  int64            // the daemon's own resident set
	Children childproc.Memory // summed over the live descendants
	Procs    int              // live descendants summed
}

// treeMemory reads root's RSS and the RSS, PSS and USS of each live process below it. A process
// that exits while it reads is skipped.
func treeMemory(root int) (treeMem, error) {
	procs, err := allProcs()
	if err != nil {
		return treeMem{}, err
	}
	tree := descendants(procs, root)
	if len(tree) == 0 {
		return treeMem{}, fmt.Errorf("memory of process tree: pid %d not found", root)
	}
	var t treeMem
	if t.RootRSS, err = readRSS(root); err != nil {
		return treeMem{}, err
	}
	for _, p := range tree[1:] {
		if p.Zombie() {
			continue
		}
		m, err := childproc.ProcFS{}.Memory(p.PID)
		if err != nil {
			if _, statErr := readProcStat(p.PID); statErr != nil {
				continue // exited meanwhile
			}
			return treeMem{}, err
		}
		t.Children.RSS += m.RSS
		t.Children.PSS += m.PSS
		t.Children.USS += m.USS
		t.Children.Anon += m.Anon
		t.Procs++
	}
	return t, nil
}
