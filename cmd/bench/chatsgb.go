package main

import (
	"context"
	"fmt"
	"sync"
)

// runChatsPerGB is comparison 9: how many warm chats a GB holds. One daemon opens GBChats[i]
// chats in turn, each with one turn, and at each level the bench reads the daemon's RSS and the
// memory of every process below it from /proc. A chat costs (daemon RSS + the children's memory) /
// chats, counted two ways side by side: with the children's RSS, which counts the pages of the
// codex binary they share once per child, and with their PSS, which shares those pages out, so
// that summed they count once. Spare children, if the daemon keeps any by default, are part of
// the cost.
func (b *bench) runChatsPerGB(ctx context.Context) error {
	const name = labelChatsGB
	mock, err := b.newMock(0)
	if err != nil {
		return err
	}
	defer mock.Close()
	s, err := b.ws.newSide("chats-per-gb", mock)
	if err != nil {
		return err
	}
	levels := b.cfg.GBChats
	top := levels[len(levels)-1]
	b.logf("chats per GB: daemon and children memory at %v warm chats", levels)
	// Room above the top level, so that no chat is evicted for a spare.
	err = b.withDaemon(ctx, s, top+4, func(d *daemon) error {
		opened := 0
		for _, n := range levels {
			if err := openChats(ctx, d, opened, n); err != nil {
				return err
			}
			opened = n
			doc, err := d.status.Get(ctx)
			if err != nil {
				return err
			}
			if live := countChats(doc.Snapshot); live != n {
				return fmt.Errorf("daemon reports %d live chat children, want %d", live, n)
			}
			m, err := treeMemory(d.pid)
			if err != nil {
				return err
			}
			rss := chatsPerGB(m.RootRSS+m.Children.RSS, n)
			pss := chatsPerGB(m.RootRSS+m.Children.PSS, n)
			b.addRow(name, fmt.Sprintf("chats per GB at %d warm chats", n), "rss", rss, "pss", pss, "pss/rss", ratio(pss, rss))
			b.addNote(name, fmt.Sprintf("%d warm chats", n), fmt.Sprintf("daemon RSS %s MB + %d codex processes: RSS %s MB, PSS %s MB, USS %s MB; per chat %s MB by RSS, %s MB by PSS",
				fmtFloat(mb(m.RootRSS)), m.Procs, fmtFloat(mb(m.Children.RSS)), fmtFloat(mb(m.Children.PSS)), fmtFloat(mb(m.Children.USS)),
				fmtFloat(mb(m.RootRSS+m.Children.RSS)/float64(n)), fmtFloat(mb(m.RootRSS+m.Children.PSS)/float64(n))))
			b.sum.set(fmt.Sprintf("chats_per_gb_rss_%d", n), rss)
			b.sum.set(fmt.Sprintf("chats_per_gb_pss_%d", n), pss)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("chats per GB: %w", err)
	}
	return nil
}

// openChatsParallel is how many chats openChats starts at once: enough to keep two cores busy
// spawning children, few enough not to queue for a slot.
const openChatsParallel = 4

// openChats gives chats from..to-1 one turn each, openChatsParallel at a time.
func openChats(ctx context.Context, d *daemon, from, to int) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range openChatsParallel {
		wg.Go(func() {
			for i := range next {
				if _, _, err := d.post(ctx, fmt.Sprintf("peer:bench-gb-%d", i), fmt.Sprintf("memory chat %d", i)); err != nil {
					cancel(err)
				}
			}
		})
	}
	for i := from; i < to && ctx.Err() == nil; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return context.Cause(ctx)
}

// chatsPerGB is how many chats fit in a GB (2^30 bytes) when n chats take total bytes.
func chatsPerGB(total int64, n int) float64 {
	if total <= 0 || n <= 0 {
		return ratio(0, 0) // NaN: nothing measured
	}
	return float64(1<<30) / (float64(total) / float64(n))
}

// mb converts bytes to MB (2^20 bytes).
func mb(bytes int64) float64 { return float64(bytes) / (1 << 20) }
