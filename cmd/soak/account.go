package main

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"time"
)

// Message is one inbound message the soak put into the platform's activity feed.
type Message struct {
	// Label names the chat inside message texts ("c0" for the canvas user, "p3" for a peer).
	Label string
	// ChatKey is the daemon's chat key: canvas:<ws> or peer:<peer workspace id>.
	ChatKey string
	// Index is the message's position in its chat, from 0; messages of a chat are injected in
	// index order.
	Index      int
	ActivityID string
	Seq        int64
}

// Reply is one reply the platform accepted (HTTP 200), identified by its place in the
// platform's call log.
type Reply struct {
	// Order is the index of the call in the platform's call log: the acceptance order.
	Order   int
	ChatKey string
	Text    string
	// MessageID is the A2A messageId; "" for a notify (canvas reply), which carries no id.
	MessageID string
	At        time.Time
}

// Ack is one acked_seq the platform's mailbox accepted.
type Ack struct {
	Order int
	Seq   int64
}

// Kill is one SIGKILL of the daemon with the state it left on disk.
type Kill struct {
	At time.Time
	// Boundary is the call-log index of the next daemon's first call (its register): every call
	// before it was made by this daemon or an earlier one. len(calls) when no daemon followed.
	Boundary int
	State    BridgeState
	// Sessions is sessions.json as the killed daemon left it.
	Sessions map[string]string
}

// BridgeState is what the soak reads of the daemon's bridge-state.json.
type BridgeState struct {
	Cursor   string         `json:"cursor"`
	AckedSeq int64          `json:"acked_seq"`
	Done     []string       `json:"done"`
	Pending  []PendingReply `json:"pending"`
}

// PendingReply is a reply the daemon had stored but not seen accepted.
type PendingReply struct {
	ActivityID string `json:"activity_id"`
	ChatKey    string `json:"chat_key"`
	Text       string `json:"text"`
	MessageID  string `json:"message_id"`
}

// tokenPattern finds the message token "msg <label>-<index>" the soak puts in every message.
// The mock model echoes the message, so a real answer carries its message's token; a visible
// error reply (failed, interrupted, watchdog) does not.
var tokenPattern = regexp.MustCompile(`\bmsg ([a-z][a-z0-9]*)-([0-9]+)\b`)

// historyPattern reads the mock model's "reply #<n>:" prefix: n counts the user messages codex
// sent as the conversation, so it grows along a chat as long as its thread survives.
var historyPattern = regexp.MustCompile(`^reply #([0-9]+): `)

// messageText is the text of a message; parseToken reads it back.
func messageText(label string, index int) string {
	return fmt.Sprintf("msg %s-%d: please answer", label, index)
}

func parseToken(text string) (label string, index int, ok bool) {
	m := tokenPattern.FindStringSubmatch(text)
	if m == nil {
		return "", 0, false
	}
	n, err := strconv.Atoi(m[2])
	if err != nil {
		return "", 0, false
	}
	return m[1], n, true
}

func parseHistory(text string) (int, bool) {
	m := historyPattern.FindStringSubmatch(text)
	if m == nil {
		return 0, false
	}
	n, err := strconv.Atoi(m[1])
	return n, err == nil
}

// Redelivery is a reply delivered again after it had been accepted: the same A2A messageId, or
// for a canvas reply the same text right after a daemon kill that left it pending.
type Redelivery struct {
	Reply    Reply
	Original Reply
	// InWindow says the daemon was killed after the platform accepted Original and before the
	// daemon persisted it as delivered: the state file it left still had the reply pending.
	// At-least-once delivery allows exactly this duplicate.
	InWindow bool
	// Kill is the index of the kill that caused it (-1: none found), SinceAccept the time from
	// the original acceptance to that kill.
	Kill        int
	SinceAccept time.Duration
}

// Regression is a chat whose conversation history shrank between two answers: its thread (or
// part of it) was lost.
type Regression struct {
	ChatKey    string
	Prev, Next int // the "reply #n" counts
	Reply      Reply
}

// MessageResult is what a message got.
type MessageResult struct {
	Message Message
	// Replies are the distinct replies assigned to it (re-deliveries excluded), oldest first.
	Replies []Reply
}

// FirstOrder is the call-log index of the message's first reply, or -1 when it has none.
func (r *MessageResult) FirstOrder() int {
	if len(r.Replies) == 0 {
		return -1
	}
	return r.Replies[0].Order
}

// Accounting correlates the platform's replies with the injected messages.
type Accounting struct {
	Results      []*MessageResult // in the order of the msgs given to Correlate
	Redeliveries []Redelivery
	// Extra are replies that belong to no message: more replies than messages in a chat, or a
	// token of an unknown message. Misrouted carry a token of a message of another chat.
	Extra     []Reply
	Misrouted []Reply
	// Regressions are chats whose "reply #n" count did not grow.
	Regressions []Regression
	// Answers are distinct token-carrying replies per chat key (chats that completed a turn).
	Answers map[string]int
	bySeq   []*MessageResult // sorted by Seq
	// excused marks the (kill, pending reply) pairs that explained a re-delivery already: a
	// reply left pending by one kill is delivered again once by the next daemon, not twice.
	excused map[[2]int]bool
}

// Correlate assigns every accepted reply to a message. The bridge answers a chat's messages one
// at a time in feed order and delivers a reply before it starts the next message, so a chat's
// replies arrive in its messages' order. A reply carrying a message token belongs to that
// message; one without (a visible error reply) belongs to the chat's next message not yet
// answered. Re-deliveries are recognized first and kept apart: the same A2A messageId (the bridge
// reuses it for a stored reply), or for canvas replies, which carry no id, the same text as the
// chat's previous reply when a kill between the two left that very reply (same text, same
// activity) pending.
func Correlate(msgs []Message, replies []Reply, kills []Kill) *Accounting {
	a := &Accounting{Answers: make(map[string]int), excused: make(map[[2]int]bool)}
	byToken := make(map[string]*MessageResult)
	count := make(map[string]int)
	byChatIndex := make(map[string]map[int]*MessageResult)
	for _, m := range msgs {
		r := &MessageResult{Message: m}
		a.Results = append(a.Results, r)
		byToken[m.Label+"-"+strconv.Itoa(m.Index)] = r
		count[m.ChatKey] = max(count[m.ChatKey], m.Index+1)
		if byChatIndex[m.ChatKey] == nil {
			byChatIndex[m.ChatKey] = make(map[int]*MessageResult)
		}
		byChatIndex[m.ChatKey][m.Index] = r
	}
	a.bySeq = append([]*MessageResult(nil), a.Results...)
	sort.SliceStable(a.bySeq, func(i, j int) bool { return a.bySeq[i].Message.Seq < a.bySeq[j].Message.Seq })

	chats := make(map[string][]Reply)
	var chatOrder []string
	sorted := append([]Reply(nil), replies...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Order < sorted[j].Order })
	for _, r := range sorted {
		if _, ok := chats[r.ChatKey]; !ok {
			chatOrder = append(chatOrder, r.ChatKey)
		}
		chats[r.ChatKey] = append(chats[r.ChatKey], r)
	}

	for _, chat := range chatOrder {
		a.correlateChat(chat, chats[chat], kills, chatIndex{byToken: byToken, byIndex: byChatIndex[chat], count: count[chat]})
	}
	return a
}

// chatIndex finds a chat's messages.
type chatIndex struct {
	byToken map[string]*MessageResult // all chats' messages by "<label>-<index>"
	byIndex map[int]*MessageResult    // this chat's messages by index
	count   int                       // this chat's messages
}

// correlateChat walks one chat's replies in acceptance order. next is the chat's first message
// not answered yet.
func (a *Accounting) correlateChat(chat string, replies []Reply, kills []Kill, ix chatIndex) {
	next, prevHistory := 0, 0
	byMessageID := make(map[string]Reply)
	owner := make(map[int]string) // reply order → activity id of the message it was assigned to
	var prev *Reply               // the last distinct reply
	for _, r := range replies {
		if r.MessageID != "" {
			if orig, ok := byMessageID[r.MessageID]; ok {
				a.Redeliveries = append(a.Redeliveries, a.redelivery(r, orig, owner[orig.Order], kills))
				continue
			}
			byMessageID[r.MessageID] = r
		} else if prev != nil && prev.Text == r.Text {
			// A canvas reply has no id: two equal texts in a row are a re-delivery only if a
			// kill between them left the first one's reply pending; otherwise they are two
			// replies that read the same (two interrupted turns, say).
			if d := a.redelivery(r, *prev, owner[prev.Order], kills); d.InWindow {
				a.Redeliveries = append(a.Redeliveries, d)
				continue
			}
		}
		prev = &r

		label, idx, ok := parseToken(r.Text)
		if !ok {
			if m := ix.byIndex[next]; m != nil && next < ix.count {
				m.Replies = append(m.Replies, r)
				owner[r.Order] = m.Message.ActivityID
				next++
			} else {
				a.Extra = append(a.Extra, r)
			}
			continue
		}
		m := ix.byToken[label+"-"+strconv.Itoa(idx)]
		switch {
		case m == nil:
			a.Extra = append(a.Extra, r)
			continue
		case m.Message.ChatKey != chat:
			a.Misrouted = append(a.Misrouted, r)
			continue
		}
		m.Replies = append(m.Replies, r)
		owner[r.Order] = m.Message.ActivityID
		next = max(next, idx+1)
		a.Answers[chat]++
		if n, ok := parseHistory(r.Text); ok {
			if prevHistory > 0 && n <= prevHistory {
				a.Regressions = append(a.Regressions, Regression{ChatKey: chat, Prev: prevHistory, Next: n, Reply: r})
			}
			prevHistory = n
		}
	}
}

// redelivery classifies r, a second delivery of orig, against the kills between the two: it is in
// a kill window when a kill's state still had orig pending (same chat, text and messageId, and
// the activity orig answered, when known).
func (a *Accounting) redelivery(r, orig Reply, activity string, kills []Kill) Redelivery {
	d := Redelivery{Reply: r, Original: orig, Kill: -1}
	for i, k := range kills {
		if k.Boundary <= orig.Order || k.Boundary > r.Order {
			continue
		}
		if d.Kill < 0 {
			d.Kill, d.SinceAccept = i, k.At.Sub(orig.At)
		}
		for j, p := range k.State.Pending {
			if p.ChatKey != orig.ChatKey || p.Text != orig.Text || a.excused[[2]int{i, j}] {
				continue
			}
			if (orig.MessageID != "" && p.MessageID != orig.MessageID) || (activity != "" && p.ActivityID != activity) {
				continue
			}
			a.excused[[2]int{i, j}] = true
			d.InWindow, d.Kill, d.SinceAccept = true, i, k.At.Sub(orig.At)
			return d
		}
	}
	return d
}

// Lost are the messages without any reply.
func (a *Accounting) Lost() []Message {
	var out []Message
	for _, r := range a.Results {
		if len(r.Replies) == 0 {
			out = append(out, r.Message)
		}
	}
	return out
}

// Duplicated are the messages with more than one distinct reply: the message was answered
// again (codex ran twice), which no kill window excuses.
func (a *Accounting) Duplicated() []*MessageResult {
	var out []*MessageResult
	for _, r := range a.Results {
		if len(r.Replies) > 1 {
			out = append(out, r)
		}
	}
	return out
}

// InWindow counts the re-deliveries the kill window explains.
func (a *Accounting) InWindow() int {
	n := 0
	for _, d := range a.Redeliveries {
		if d.InWindow {
			n++
		}
	}
	return n
}

// Duplicates counts every reply beyond the first a message got, re-deliveries included, plus
// replies that belong to no message.
func (a *Accounting) Duplicates() int {
	n := len(a.Redeliveries) + len(a.Extra)
	for _, r := range a.Duplicated() {
		n += len(r.Replies) - 1
	}
	return n
}

// AnsweredBy counts the messages whose first reply was accepted before call-log index order.
func (a *Accounting) AnsweredBy(order int) int {
	n := 0
	for _, r := range a.Results {
		if f := r.FirstOrder(); f >= 0 && f < order {
			n++
		}
	}
	return n
}
