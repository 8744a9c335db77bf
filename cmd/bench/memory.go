package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"

	"github.com/molecule-ai/codex-warm/supervisor"
)

// runMemory is comparison 5, in two independent parts: the daemon's own RSS per live child, and
// the RSS of a codex child started natively vs through the npm node wrapper.
func (b *bench) runMemory(ctx context.Context) error {
	mock, err := b.newMock(0)
	if err != nil {
		return err
	}
	defer mock.Close()
	return errors.Join(b.daemonRSS(ctx, mock), b.nodeVsNative(ctx, mock))
}

// daemonRSS reads the daemon's VmRSS (its own process only, codex excluded) with no children and
// again with MemChats chats open, each with a live child after one turn: the growth per child is
// what the daemon spends on bookkeeping, buffers and goroutines for a session.
func (b *bench) daemonRSS(ctx context.Context, mock model) error {
	const name = labelMemory
	s, err := b.ws.newSide("memory-daemon", mock)
	if err != nil {
		return err
	}
	k := b.cfg.MemChats
	b.logf("memory: daemon RSS with 0 and %d live children", k)
	// No spares: the daemon starts with no child at all, and every child it has is a chat's.
	spares, err := b.noSpares(ctx)
	if err != nil {
		return fmt.Errorf("memory (daemon): %w", err)
	}
	err = b.withDaemonConfig(ctx, b.daemonConfig(s, k, spares), func(d *daemon) error {
		rss0, err := readRSS(d.pid)
		if err != nil {
			return err
		}
		for i := range k {
			if _, _, err := d.post(ctx, fmt.Sprintf("peer:bench-mem-%d", i), fmt.Sprintf("memory chat %d", i)); err != nil {
				return err
			}
		}
		doc, err := d.status.Get(ctx)
		if err != nil {
			return err
		}
		var childRSS []float64
		for _, c := range doc.Snapshot.Children {
			if c.PID > 0 && c.State != supervisor.StateSpare {
				childRSS = append(childRSS, float64(c.RSSBytes)/(1<<20))
			}
		}
		if live := countChats(doc.Snapshot); live != k {
			return fmt.Errorf("daemon reports %d live chat children, want %d", live, k)
		}
		rssK, err := readRSS(d.pid)
		if err != nil {
			return err
		}
		perChildKB := float64(rssK-rss0) / 1024 / float64(k)
		b.addNote(name, "daemon RSS (codex excluded)", fmt.Sprintf("%s MB at 0 children, %s MB at %d: %s KB per child",
			fmtFloat(float64(rss0)/(1<<20)), fmtFloat(float64(rssK)/(1<<20)), k, fmtFloat(perChildKB)))
		b.addNote(name, "codex child RSS in the daemon", fmt.Sprintf("%s MB median of %d", fmtFloat(median(childRSS)), len(childRSS)))
		b.sum.set("daemon_rss_per_child_kb", perChildKB)
		b.sum.set("daemon_rss_mb", float64(rssK)/(1<<20))
		return nil
	})
	if err != nil {
		return fmt.Errorf("memory (daemon): %w", err)
	}
	return nil
}

// nodeVsNative measures the RSS of one codex app-server after the handshake and one turn,
// started as the native binary and through `node codex.js app-server` (node plus the native
// child it spawns, summed). The two alternate.
func (b *bench) nodeVsNative(ctx context.Context, mock model) error {
	const name = labelMemory
	js, err := b.cfg.codexJS()
	if err != nil {
		return fmt.Errorf("memory (node vs native): %w", err)
	}
	node, err := exec.LookPath(b.cfg.Node)
	if err != nil {
		return fmt.Errorf("memory (node vs native): %w", err)
	}
	nativeSide, err := b.ws.newSide("memory-native", mock)
	if err != nil {
		return err
	}
	nodeSide, err := b.ws.newSide("memory-node", mock)
	if err != nil {
		return err
	}
	n := b.cfg.MemSamples
	b.logf("memory: codex RSS native vs node wrapper, %d each (alternating)", n)
	var nativeMB, nodeMB []float64
	var nodeProcs int
	measure := func(cfg warmConfig, i int) (float64, int, error) {
		w, err := startWarm(ctx, cfg, "")
		if err != nil {
			return 0, 0, err
		}
		if _, err := w.send(ctx, fmt.Sprintf("memory sample %d", i+1)); err != nil {
			return 0, 0, joinClose(err, w.close())
		}
		rss, procs, err := treeRSS(w.pid())
		if err != nil {
			return 0, 0, joinClose(err, w.close())
		}
		return float64(rss) / (1 << 20), procs, w.close()
	}
	err = alternate(n, func(i int) error {
		mb, _, err := measure(warmConfig{Bin: b.cfg.CodexBin, Side: nativeSide}, i)
		if err != nil {
			return fmt.Errorf("native: %w", err)
		}
		nativeMB = append(nativeMB, mb)
		return nil
	}, func(i int) error {
		mb, procs, err := measure(warmConfig{Bin: node, Args: []string{js, "app-server"}, Side: nodeSide}, i)
		if err != nil {
			return fmt.Errorf("node wrapper: %w", err)
		}
		nodeMB = append(nodeMB, mb)
		nodeProcs = procs
		return nil
	})
	if err != nil {
		return fmt.Errorf("memory (node vs native): %w", err)
	}
	nat, nod := median(nativeMB), median(nodeMB)
	b.addRow(name, fmt.Sprintf("codex RSS MB after 1 turn, median of %d", n), "native", nat,
		fmt.Sprintf("node(%d procs)", nodeProcs), nod, "node/native", ratio(nod, nat))
	b.sum.set("codex_native_rss_mb", nat)
	b.sum.set("codex_node_rss_mb", nod)
	return nil
}
