package main

import (
	"context"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

// chat is one conversation partner of the daemon.
type chat struct {
	Label   string // in message texts
	Peer    string // peer workspace id; "" for the canvas user
	ChatKey string
}

// chatsFor lists the soak's chats: the canvas user (label c0) when canvas is set, peers p1...
func chatsFor(n int, canvas bool) []chat {
	var out []chat
	for i := range n {
		if i == 0 && canvas {
			out = append(out, chat{Label: "c0", ChatKey: "canvas:" + workspaceID})
			continue
		}
		label := "p" + strconv.Itoa(i)
		if !canvas {
			label = "p" + strconv.Itoa(i+1)
		}
		out = append(out, peerChat(label))
	}
	return out
}

func peerChat(label string) chat {
	peer := "peer-" + label
	return chat{Label: label, Peer: peer, ChatKey: "peer:" + peer}
}

// injectionOrder interleaves the chats' messages at random while keeping each chat's messages in
// index order.
func injectionOrder(chats []chat, perChat int, rng *rand.Rand) []chat {
	order := make([]chat, 0, len(chats)*perChat)
	for range perChat {
		order = append(order, chats...)
	}
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	return order
}

// enqueue puts the chat's next message into the platform's feed and records it.
func (h *rig) enqueue(c chat) Message {
	h.msgMu.Lock()
	defer h.msgMu.Unlock()
	idx := h.perChat[c.ChatKey]
	h.perChat[c.ChatKey]++
	h.seq++
	text := messageText(c.Label, idx)
	row := moleculetest.CanvasMessage(text)
	if c.Peer != "" {
		row = moleculetest.PeerMessage(c.Peer, text)
	}
	ids := h.plat.Enqueue(row.WithSeq(h.seq))
	m := Message{Label: c.Label, ChatKey: c.ChatKey, Index: idx, ActivityID: ids[0], Seq: h.seq}
	h.msgs = append(h.msgs, m)
	return m
}

// inject feeds order into the platform paced evenly over d. It stops early when ctx ends.
func (h *rig) inject(ctx context.Context, order []chat, d time.Duration) {
	if len(order) == 0 {
		return
	}
	t := time.NewTicker(d / time.Duration(len(order)))
	defer t.Stop()
	for i, c := range order {
		if i > 0 {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		h.enqueue(c)
	}
}
