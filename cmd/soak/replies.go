package main

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

// callLog is what the soak reads from the platform's call log.
type callLog struct {
	Replies []Reply
	Acks    []Ack
	// Failures counts polls and replies answered 502 or left hanging; Gone counts 410s.
	Failures, Hangs, Gone int
}

// readCalls extracts the accepted replies, the accepted acks and the injected failures from the
// platform's calls, in call-log order. ws is the daemon's workspace: notifies to it are canvas
// replies; A2A sends go to peers.
func readCalls(calls []moleculetest.Call, ws string) callLog {
	var l callLog
	for i, c := range calls {
		switch c.Route {
		case moleculetest.RouteActivity, moleculetest.RouteNotify, moleculetest.RouteA2A:
			switch c.Status {
			case http.StatusBadGateway:
				l.Failures++
			case moleculetest.StatusHung:
				l.Failures++
				l.Hangs++
			case http.StatusGone:
				l.Gone++
			}
		}
		if c.Status != http.StatusOK {
			continue
		}
		switch c.Route {
		case moleculetest.RouteNotify, moleculetest.RouteA2A:
			text, messageID, ok := c.Reply()
			if !ok {
				continue
			}
			chatKey := "canvas:" + ws
			if c.Route == moleculetest.RouteA2A {
				// Path is /workspaces/<peer>/a2a.
				chatKey = "peer:" + strings.TrimSuffix(strings.TrimPrefix(c.Path, "/workspaces/"), "/a2a")
			}
			l.Replies = append(l.Replies, Reply{Order: i, ChatKey: chatKey, Text: text, MessageID: messageID, At: c.At})
		case moleculetest.RouteAck:
			var body struct {
				AckedSeq int64 `json:"acked_seq"`
			}
			if json.Unmarshal(c.Body, &body) == nil {
				l.Acks = append(l.Acks, Ack{Order: i, Seq: body.AckedSeq})
			}
		}
	}
	return l
}
