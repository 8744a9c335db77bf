// Package projector turns one turn's app-server notifications into what the daemon needs: the
// reply text and the token usage. It does no I/O and keeps no state, so replaying the same
// notifications always yields the same Projection.
//
// Rules, in the order a reader usually asks about them:
//
//   - The turn. Project describes the turn named by the last turn/completed, else by the last
//     turn/started. Notifications that name another turn (turnId or turn.id) are ignored, so a
//     caller that passes more than one turn gets the last one. With neither notification every
//     item counts. ThreadID and TurnID come from the turn notifications, else from the items.
//   - Status and Error come from turn/completed, else turn/started (status "inProgress"). When
//     turn/completed carries no error, the last `error` notification with willRetry:false is
//     used; willRetry:true errors are transient and never reported.
//   - Reply is the last completed agentMessage whose phase is "final_answer", else the last
//     completed agentMessage of any phase, else "". "Completed" means an item/completed
//     notification, or, for items whose item/completed never arrived, turn/completed's
//     turn.items. Deltas and item/started text never become the reply.
//   - The "<turn_aborted>" marker block (<turn_aborted>...</turn_aborted>) is cut out of an
//     agentMessage's text; what remains may still be the reply, an empty remainder never is.
//   - Items without an id cannot be matched across item/started and item/completed, so only
//     their item/completed counts.
//   - Usage is the sum of `last` over the turn's thread/tokenUsage/updated notifications: `last`
//     is one model call, and a turn makes one call per tool round trip. `total` is the thread's
//     running total, which would need the value from before the turn to be of use.
package projector

import (
	"encoding/json"
	"errors"
	"strings"

	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// AbortedMarker is the tag codex puts around the notice of a turn torn down without
// turn/completed.
const AbortedMarker = "<turn_aborted>"

const abortedMarkerEnd = "</turn_aborted>"

// Usage is the token usage of one turn.
type Usage struct {
	InputTokens           int64 `json:"input_tokens"`
	CachedInputTokens     int64 `json:"cached_input_tokens"`
	OutputTokens          int64 `json:"output_tokens"`
	ReasoningOutputTokens int64 `json:"reasoning_output_tokens"`
	TotalTokens           int64 `json:"total_tokens"`
}

// Projection is everything derived from one turn.
type Projection struct {
	ThreadID  string
	TurnID    string
	Status    string
	Error     *protocol.TurnError
	Completed bool // turn/completed was seen
	Reply     string
	Usage     Usage
}

// itemState is one thread item as last reported.
type itemState struct {
	item      protocol.Item
	completed bool
}

// projector accumulates one Project call.
type projector struct {
	turnID   string // the turn being projected; "" = accept every turn id
	threadID string

	order    []*itemState // first appearance order
	byID     map[string]*itemState
	sawItems bool // any item/completed arrived (turn.items are then only a fallback)

	status    string
	turnErr   *protocol.TurnError
	lastErr   *protocol.TurnError // last error notification with willRetry:false
	completed bool
	turnItems []json.RawMessage
	usage     Usage
}

// Project derives a Projection from a turn's notifications in arrival order. See the package
// documentation for the rules.
func Project(notifs []protocol.Notification) Projection {
	p := &projector{byID: map[string]*itemState{}, turnID: targetTurn(notifs)}
	for _, n := range notifs {
		p.apply(n)
	}
	return p.result()
}

// targetTurn picks the turn to project: the last completed one, else the last started one.
func targetTurn(notifs []protocol.Notification) string {
	var started, completed string
	for _, n := range notifs {
		switch n.Method {
		case protocol.NotifyTurnStarted, protocol.NotifyTurnCompleted:
			var tn protocol.TurnNotification
			if json.Unmarshal(n.Params, &tn) != nil || tn.Turn.ID == "" {
				continue
			}
			if n.Method == protocol.NotifyTurnCompleted {
				completed = tn.Turn.ID
			} else {
				started = tn.Turn.ID
			}
		}
	}
	if completed != "" {
		return completed
	}
	return started
}

// mine reports whether a notification naming turnID (possibly "") belongs to the projection.
func (p *projector) mine(turnID string) bool {
	return p.turnID == "" || turnID == "" || turnID == p.turnID
}

func (p *projector) setThread(id string) {
	if id != "" {
		p.threadID = id
	}
}

func (p *projector) apply(n protocol.Notification) {
	switch n.Method {
	case protocol.NotifyTurnStarted, protocol.NotifyTurnCompleted:
		var tn protocol.TurnNotification
		if json.Unmarshal(n.Params, &tn) != nil || !p.mine(tn.Turn.ID) {
			return
		}
		p.setThread(tn.ThreadID)
		if n.Method == protocol.NotifyTurnStarted {
			if !p.completed {
				p.status = tn.Turn.Status
			}
			return
		}
		p.completed = true
		p.status = tn.Turn.Status
		p.turnErr = tn.Turn.Error
		p.turnItems = tn.Turn.Items

	case protocol.NotifyItemStarted, protocol.NotifyItemCompleted:
		var in protocol.ItemNotification
		if json.Unmarshal(n.Params, &in) != nil || !p.mine(in.TurnID) {
			return
		}
		it, ok := decodeItem(in.Item)
		if !ok {
			return
		}
		p.setThread(in.ThreadID)
		done := n.Method == protocol.NotifyItemCompleted
		if done {
			p.sawItems = true
		}
		p.record(it, done)

	case protocol.NotifyTokenUsageUpdated:
		var tu protocol.TokenUsageNotification
		if json.Unmarshal(n.Params, &tu) != nil || !p.mine(tu.TurnID) {
			return
		}
		l := tu.TokenUsage.Last
		p.usage.InputTokens += l.InputTokens
		p.usage.CachedInputTokens += l.CachedInputTokens
		p.usage.OutputTokens += l.OutputTokens
		p.usage.ReasoningOutputTokens += l.ReasoningOutputTokens
		p.usage.TotalTokens += l.TotalTokens

	case protocol.NotifyError:
		var en protocol.ErrorNotification
		if json.Unmarshal(n.Params, &en) != nil || !p.mine(en.TurnID) || en.WillRetry {
			return
		}
		e := en.Error
		p.lastErr = &e
	}
}

// decodeItem decodes a thread item. A field of an unexpected type is dropped (encoding/json
// fills the rest); anything without a type is not an item.
func decodeItem(raw json.RawMessage) (protocol.Item, bool) {
	it, err := protocol.DecodeItem(raw)
	var typeErr *json.UnmarshalTypeError
	if err != nil && !errors.As(err, &typeErr) {
		return protocol.Item{}, false
	}
	return it, it.Type != ""
}

// record merges one report of an item into the table.
func (p *projector) record(it protocol.Item, completed bool) {
	if it.ID == "" {
		// Unmatchable: count only the completed report, as its own item.
		if completed {
			p.order = append(p.order, &itemState{item: it, completed: true})
		}
		return
	}
	if st, ok := p.byID[it.ID]; ok {
		if !st.completed || completed {
			st.item, st.completed = it, completed || st.completed
		}
		return
	}
	st := &itemState{item: it, completed: completed}
	p.byID[it.ID] = st
	p.order = append(p.order, st)
}

// mergeTurnItems adds turn/completed's turn.items for items whose item/completed never came.
// Id-less turn items cannot be matched, so they are used only when no item/completed arrived
// at all.
func (p *projector) mergeTurnItems() {
	for _, raw := range p.turnItems {
		it, ok := decodeItem(raw)
		if !ok {
			continue
		}
		if it.ID == "" {
			if !p.sawItems {
				p.order = append(p.order, &itemState{item: it, completed: true})
			}
			continue
		}
		if st, ok := p.byID[it.ID]; ok && st.completed {
			continue
		}
		p.record(it, true)
	}
}

func (p *projector) result() Projection {
	p.mergeTurnItems()
	pr := Projection{
		ThreadID:  p.threadID,
		TurnID:    p.turnID,
		Status:    p.status,
		Error:     p.turnErr,
		Completed: p.completed,
		Usage:     p.usage,
	}
	if pr.Error == nil {
		pr.Error = p.lastErr
	}
	var final, anyPhase string
	var haveFinal, haveAny bool
	for _, st := range p.order {
		it := st.item
		if it.Type != protocol.ItemAgentMessage || !st.completed {
			continue
		}
		text := stripAborted(it.Text)
		if strings.TrimSpace(text) == "" {
			continue
		}
		anyPhase, haveAny = text, true
		if it.Phase != nil && *it.Phase == protocol.PhaseFinalAnswer {
			final, haveFinal = text, true
		}
	}
	switch {
	case haveFinal:
		pr.Reply = final
	case haveAny:
		pr.Reply = anyPhase
	}
	return pr
}

// stripAborted cuts every <turn_aborted>...</turn_aborted> block (an unclosed one runs to the
// end) out of text and trims the rest when a block was found.
func stripAborted(text string) string {
	if !strings.Contains(text, AbortedMarker) {
		return text
	}
	// Cutting can join the pieces into a new marker ("<turn_<turn_aborted>..."), so repeat;
	// every pass makes the text shorter.
	for strings.Contains(text, AbortedMarker) {
		text = stripAbortedOnce(text)
	}
	return strings.TrimSpace(text)
}

func stripAbortedOnce(text string) string {
	var b strings.Builder
	rest := text
	for {
		i := strings.Index(rest, AbortedMarker)
		if i < 0 {
			b.WriteString(rest)
			break
		}
		b.WriteString(rest[:i])
		rest = rest[i+len(AbortedMarker):]
		j := strings.Index(rest, abortedMarkerEnd)
		if j < 0 {
			break
		}
		rest = rest[j+len(abortedMarkerEnd):]
	}
	return b.String()
}
