package main

import (
	"context"
	"fmt"
	"time"
)

// sharedFirstSamples is how many new chats the shared-children comparison times per setting.
const sharedFirstSamples = 10

// runShared is comparison 9d: shared children (--threads-per-child N) side by side for each N
// of SharedN. For each N one daemon opens SharedChats[i] warm chats in turn (one turn each) and
// the bench reads the codex processes' memory from /proc: chats per GB of the children's PSS
// (the daemon's own RSS, the same whatever N, is in the note). On the same daemon it then times
// the warm latency (one warm chat, LatencyMsgs messages in sequence, the median) and the first
// message of a new chat (sharedFirstSamples new chats, each with a spare ready, the median). A
// second daemon per N, on a mock taking TPLatency per response, runs 16 chats at once (TPChats):
// one round to open them, then TPMsgs messages each, timed.
func (b *bench) runShared(ctx context.Context) error {
	const name = labelShared
	levels := b.cfg.SharedChats
	b.logf("shared children: --threads-per-child %v; chats per GB at %v warm chats, warm and first-message latency, %d chats at once", b.cfg.SharedN, levels, b.cfg.TPChats)
	perGB, warm, first, err := b.sharedMemory(ctx)
	if err != nil {
		return err
	}
	// The throughput daemons run after the first mock closed: a mock serving TLS writes its CA
	// where every codex child reads it (workspace.caFile), so two mocks at once would leave the
	// first one's children distrusting it.
	rates, err := b.sharedThroughput(ctx)
	if err != nil {
		return err
	}
	for i, n := range b.cfg.SharedN {
		w, f := median(warm[i]), median(first[i])
		b.addRow(name, fmt.Sprintf("N=%d: warm ms/msg (median of %d), first msg ms (median of %d)", n, len(warm[i]), len(first[i])),
			"warm", w, "first", f, "first/warm", ratio(f, w))
		b.addRow(name, fmt.Sprintf("N=%d: %d chats at once, msgs/s (%s model latency)", n, b.cfg.TPChats, b.cfg.TPLatency),
			"msgs/s", rates[i], "msgs", float64(b.cfg.TPChats*b.cfg.TPMsgs), "per chat", rates[i]/float64(b.cfg.TPChats))
		b.sum.set(fmt.Sprintf("shared_%d_warm_ms", n), w)
		b.sum.set(fmt.Sprintf("shared_%d_first_msg_ms", n), f)
		b.sum.set(fmt.Sprintf("shared_%d_msgs_per_sec", n), rates[i])
	}
	// Chats per GB side by side: each setting against the first (N=1 by default).
	for _, chats := range levels {
		got := perGB[chats]
		for i := 1; i < len(got); i++ {
			b.addRow(name, fmt.Sprintf("chats per GB of children's PSS at %d warm chats", chats),
				fmt.Sprintf("N=%d", b.cfg.SharedN[0]), got[0], fmt.Sprintf("N=%d", b.cfg.SharedN[i]), got[i],
				"ratio", ratio(got[i], got[0]))
		}
		if len(got) == 1 {
			b.addRow(name, fmt.Sprintf("chats per GB of children's PSS at %d warm chats", chats),
				fmt.Sprintf("N=%d", b.cfg.SharedN[0]), got[0], "", 0, "", 0)
		}
	}
	return nil
}

// sharedMemory runs runShared's density daemons, one per N: chats per GB by level (one value
// per N), and each N's warm and first-message wall times in ms.
func (b *bench) sharedMemory(ctx context.Context) (perGB map[int][]float64, warm, first [][]float64, err error) {
	const name = labelShared
	mock, err := b.newMock(0)
	if err != nil {
		return nil, nil, nil, err
	}
	defer mock.Close()
	levels := b.cfg.SharedChats
	top := levels[len(levels)-1]
	perGB = make(map[int][]float64)
	for _, n := range b.cfg.SharedN {
		s, err := b.ws.newSide(fmt.Sprintf("shared-%d", n), mock)
		if err != nil {
			return nil, nil, nil, err
		}
		cfg := b.daemonConfig(s, top+sharedFirstSamples+4, nil)
		cfg.ThreadsPerChild = n
		var w, f []float64
		err = b.withDaemonConfig(ctx, cfg, func(d *daemon) error {
			opened := 0
			for _, chats := range levels {
				if err := openChats(ctx, d, opened, chats); err != nil {
					return err
				}
				opened = chats
				doc, err := d.status.Get(ctx)
				if err != nil {
					return err
				}
				if live := countChats(doc.Snapshot); live != chats {
					return fmt.Errorf("with --threads-per-child %d the daemon reports %d warm chats, want %d", n, live, chats)
				}
				m, err := treeMemory(d.pid)
				if err != nil {
					return err
				}
				pss := chatsPerGB(m.Children.PSS, chats)
				perGB[chats] = append(perGB[chats], pss)
				b.addNote(name, fmt.Sprintf("N=%d, %d warm chats", n, chats), fmt.Sprintf("%d codex processes: PSS %s MB (%s MB a chat), USS %s MB, RSS %s MB; daemon RSS %s MB",
					m.Procs, fmtFloat(mb(m.Children.PSS)), fmtFloat(mb(m.Children.PSS)/float64(chats)), fmtFloat(mb(m.Children.USS)),
					fmtFloat(mb(m.Children.RSS)), fmtFloat(mb(m.RootRSS))))
				b.sum.set(fmt.Sprintf("shared_%d_chats_per_gb_pss_%d", n, chats), pss)
				// The split that bounds density: the children's file-backed PSS is the codex
				// binary's resident pages, counted once in the sum whatever N; only the anonymous
				// part shrinks as N grows.
				file := m.Children.PSS - m.Children.Anon
				b.addNote(name, fmt.Sprintf("N=%d, %d warm chats, PSS split", n, chats), fmt.Sprintf("file-backed (the codex binary's pages, shared) %s MB, anonymous %s MB (%s MB a chat)",
					fmtFloat(mb(file)), fmtFloat(mb(m.Children.Anon)), fmtFloat(mb(m.Children.Anon)/float64(chats))))
				b.sum.set(fmt.Sprintf("shared_%d_file_mb_%d", n, chats), mb(file))
				b.sum.set(fmt.Sprintf("shared_%d_anon_mb_%d", n, chats), mb(m.Children.Anon))
			}
			ws, fs, err := b.sharedLatency(ctx, d)
			for _, x := range ws {
				w = append(w, ms(x.wall))
			}
			for _, x := range fs {
				f = append(f, ms(x.wall))
			}
			if err != nil {
				return err
			}
			events, err := mock.Steps()
			if err != nil {
				return err
			}
			b.breakdownRows(name, fmt.Sprintf("N=%d", n), stepsOfAll(events, fs), stepsOfAll(events, ws))
			return nil
		})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("shared children, N=%d: %w", n, err)
		}
		warm, first = append(warm, w), append(first, f)
	}
	return perGB, warm, first, nil
}

// sharedLatency times, on d, LatencyMsgs warm messages of one warm chat, then the first message
// of sharedFirstSamples new chats, each with a spare ready.
func (b *bench) sharedLatency(ctx context.Context, d *daemon) (warm, first []msgSample, err error) {
	post := func(chat, text string, out *[]msgSample) error {
		start := time.Now()
		reply, wall, err := d.post(ctx, chat, text)
		if err != nil {
			return err
		}
		*out = append(*out, msgSample{start: start, wall: wall, turnMS: reply.TurnMS})
		return nil
	}
	for i := range b.cfg.LatencyMsgs {
		if err := post("peer:bench-gb-0", fmt.Sprintf("warm message %d", i+1), &warm); err != nil {
			return warm, first, err
		}
	}
	for i := range sharedFirstSamples {
		if err := waitSpares(ctx, d.status, 1); err != nil {
			return warm, first, err
		}
		if err := post(fmt.Sprintf("peer:bench-shared-first-%d", i), "first message", &first); err != nil {
			return warm, first, err
		}
	}
	return warm, first, nil
}

// sharedThroughput runs runShared's throughput daemons, one per N, on a mock taking TPLatency
// per response: TPChats chats at once, one round to open them, then TPMsgs messages each.
func (b *bench) sharedThroughput(ctx context.Context) ([]float64, error) {
	slow, err := b.newMock(b.cfg.TPLatency)
	if err != nil {
		return nil, err
	}
	defer slow.Close()
	var rates []float64
	for _, n := range b.cfg.SharedN {
		ts, err := b.ws.newSide(fmt.Sprintf("shared-tp-%d", n), slow)
		if err != nil {
			return nil, err
		}
		tcfg := b.daemonConfig(ts, max(16, b.cfg.TPChats)+2, nil)
		tcfg.ThreadsPerChild = n
		err = b.withDaemonConfig(ctx, tcfg, func(d *daemon) error {
			if _, _, err := b.daemonRound(ctx, d, b.cfg.TPChats, 0, 1); err != nil {
				return err
			}
			wall, _, err := b.daemonRound(ctx, d, b.cfg.TPChats, 1, b.cfg.TPMsgs)
			if err != nil {
				return err
			}
			rates = append(rates, float64(b.cfg.TPChats*b.cfg.TPMsgs)/wall.Seconds())
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("shared children, N=%d, %d chats at once: %w", n, b.cfg.TPChats, err)
		}
	}
	return rates, nil
}
