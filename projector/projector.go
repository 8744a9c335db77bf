// Package projector turns one turn's app-server notifications into what the daemon needs: the
// reply text, a transcript, tool-call count, token usage and abort markers. It does no I/O and
// keeps no state, so replaying the same notifications always yields the same Projection.
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
//   - Aborted is true when any agentMessage text contains the "<turn_aborted>" marker. The marker
//     block (<turn_aborted>...</turn_aborted>) is cut out of the text; what remains may still be
//     the reply, an empty remainder never is.
//   - Transcript lists the turn's items in order of first appearance: userMessage → "user",
//     agentMessage → "assistant", and each tool item (commandExecution, fileChange, mcpToolCall,
//     dynamicToolCall) → a "tool_call" entry plus, once the item completed, a "tool_result"
//     entry. A tool item that never completed keeps its call (status "inProgress") and has no
//     result. Every other item type (reasoning, plan, webSearch, types added by later codex
//     versions, ...) stays out of the transcript; its type is listed in OtherItems.
//   - Entry IDs are "<turn id>:<item id>:<role>". Items without an id use "#<n>" (n = 1-based
//     position among the turn's items) in place of the item id. Such items cannot be matched
//     across item/started and item/completed, so only their item/completed counts.
//   - ToolCalls counts tool items, including declined and unfinished ones.
//   - Usage is the sum of `last` over the turn's thread/tokenUsage/updated notifications: `last`
//     is one model call, and a turn makes one call per tool round trip. `total` is the thread's
//     running total, which would need the value from before the turn to be of use.
package projector

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/molecule-ai/codex-warm/protocol"
)

// Transcript roles.
const (
	RoleUser       = "user"
	RoleAssistant  = "assistant"
	RoleToolCall   = "tool_call"
	RoleToolResult = "tool_result"
)

// AbortedMarker is the tag codex puts around the notice of a turn torn down without
// turn/completed.
const AbortedMarker = "<turn_aborted>"

const abortedMarkerEnd = "</turn_aborted>"

// StatusInProgress is the Entry status of a tool call whose item never completed.
const StatusInProgress = protocol.TurnInProgress

// Usage is the token usage of one turn.
type Usage struct {
	InputTokens           int64 `json:"input_tokens"`
	CachedInputTokens     int64 `json:"cached_input_tokens"`
	OutputTokens          int64 `json:"output_tokens"`
	ReasoningOutputTokens int64 `json:"reasoning_output_tokens"`
	TotalTokens           int64 `json:"total_tokens"`
}

// Entry is one transcript line.
type Entry struct {
	ID   string `json:"id"`
	Role string `json:"role"` // user | assistant | tool_call | tool_result
	Kind string `json:"kind"` // the codex item type
	// Text is the message text; for a tool_call what was asked (command, file list, arguments
	// as JSON); for a tool_result what came back (output, result text, error message).
	Text string `json:"text"`
	// Tool names the tool: "server/tool" for MCP, "namespace/tool" or "tool" for dynamic
	// tools, empty for commands and file changes (Kind says which).
	Tool string `json:"tool,omitempty"`
	// Status is the tool item's status (inProgress, completed, failed, declined).
	Status string `json:"status,omitempty"`
	// Phase is an agentMessage's phase (commentary, final_answer, ...), empty when unknown.
	Phase string `json:"phase,omitempty"`
	// ExitCode is a command's exit code, on its tool_result, when codex reported one.
	ExitCode *int `json:"exit_code,omitempty"`
}

// Projection is everything derived from one turn.
type Projection struct {
	ThreadID   string
	TurnID     string
	Status     string
	Error      *protocol.TurnError
	Completed  bool // turn/completed was seen
	Reply      string
	Transcript []Entry
	ToolCalls  int
	Usage      Usage
	Aborted    bool
	// OtherItems lists the types of the items kept out of the transcript, one per item, in
	// order of first appearance.
	OtherItems []string
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
	for i, st := range p.order {
		it := st.item
		key := it.ID
		if key == "" {
			key = "#" + strconv.Itoa(i+1)
		}
		id := func(role string) string { return p.turnID + ":" + key + ":" + role }
		switch it.Type {
		case protocol.ItemUserMessage:
			pr.Transcript = append(pr.Transcript, Entry{ID: id(RoleUser), Role: RoleUser, Kind: it.Type,
				Text: userText(it.Content)})

		case protocol.ItemAgentMessage:
			text, aborted := stripAborted(it.Text)
			pr.Aborted = pr.Aborted || aborted
			e := Entry{ID: id(RoleAssistant), Role: RoleAssistant, Kind: it.Type, Text: text}
			if it.Phase != nil {
				e.Phase = *it.Phase
			}
			if !st.completed {
				e.Status = StatusInProgress
			}
			pr.Transcript = append(pr.Transcript, e)
			if st.completed && strings.TrimSpace(text) != "" {
				anyPhase, haveAny = text, true
				if e.Phase == protocol.PhaseFinalAnswer {
					final, haveFinal = text, true
				}
			}

		case protocol.ItemCommandExecution, protocol.ItemFileChange, protocol.ItemMCPToolCall, protocol.ItemDynamicToolCall:
			pr.ToolCalls++
			call, res := toolEntries(it)
			call.ID, call.Role, call.Kind = id(RoleToolCall), RoleToolCall, it.Type
			if !st.completed && call.Status == "" {
				call.Status = StatusInProgress
			}
			pr.Transcript = append(pr.Transcript, call)
			if st.completed {
				res.ID, res.Role, res.Kind = id(RoleToolResult), RoleToolResult, it.Type
				pr.Transcript = append(pr.Transcript, res)
			}

		default:
			pr.OtherItems = append(pr.OtherItems, it.Type)
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
func stripAborted(text string) (string, bool) {
	if !strings.Contains(text, AbortedMarker) {
		return text, false
	}
	// Cutting can join the pieces into a new marker ("<turn_<turn_aborted>..."), so repeat;
	// every pass makes the text shorter.
	for strings.Contains(text, AbortedMarker) {
		text = stripAbortedOnce(text)
	}
	return strings.TrimSpace(text), true
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

// userText joins the text parts of a user message; other parts show as "[type]".
func userText(parts []protocol.UserInput) string {
	texts := make([]string, 0, len(parts))
	for _, in := range parts {
		if in.Type == "text" || in.Text != "" {
			texts = append(texts, in.Text)
		} else {
			texts = append(texts, "["+in.Type+"]")
		}
	}
	return strings.Join(texts, "\n")
}

// toolEntries renders a tool item as its call and result entries (ids and roles unset).
func toolEntries(it protocol.Item) (call, res Entry) {
	call.Status, res.Status = it.Status, it.Status
	switch it.Type {
	case protocol.ItemCommandExecution:
		call.Text = it.Command
		if it.AggregatedOutput != nil {
			res.Text = *it.AggregatedOutput
		}
		res.ExitCode = it.ExitCode

	case protocol.ItemFileChange:
		lines := make([]string, 0, len(it.Changes))
		for _, c := range it.Changes {
			lines = append(lines, changeKind(c.Kind)+" "+c.Path)
		}
		call.Text = strings.Join(lines, "\n")
		res.Text = it.Status

	case protocol.ItemMCPToolCall:
		call.Tool = joinName(it.Server, it.Tool)
		call.Text = compactJSON(it.Arguments)
		res.Tool = call.Tool
		if msg := mcpError(it.Error); msg != "" {
			res.Text = msg
		} else {
			res.Text = mcpResultText(it.Result)
		}

	case protocol.ItemDynamicToolCall:
		ns := ""
		if it.Namespace != nil {
			ns = *it.Namespace
		}
		call.Tool = joinName(ns, it.Tool)
		call.Text = compactJSON(it.Arguments)
		res.Tool = call.Tool
		res.Text = contentItemsText(it.ContentItems)
		if it.Success != nil && !*it.Success && res.Text == "" {
			res.Text = "tool reported failure"
		}
	}
	return call, res
}

func joinName(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "/" + name
}

// changeKind reads a fileChange kind: {"type":"add"|"delete"|"update",...} or a bare string.
func changeKind(raw json.RawMessage) string {
	var k struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(raw, &k) == nil && k.Type != "" {
		return k.Type
	}
	var s string
	if json.Unmarshal(raw, &s) == nil && s != "" {
		return s
	}
	return "change"
}

// compactJSON renders raw JSON on one line; null and absent become "".
func compactJSON(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// mcpError reads mcpToolCall.error: {"message": ...}, or a bare string.
func mcpError(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var e struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &e) == nil && e.Message != "" {
		return e.Message
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return compactJSON(raw)
}

// mcpResultText joins the text blocks of an MCP result's content; without any, the result JSON.
func mcpResultText(raw json.RawMessage) string {
	var r struct {
		Content []json.RawMessage `json:"content"`
	}
	if json.Unmarshal(raw, &r) == nil && len(r.Content) > 0 {
		if text := contentItemsText(r.Content); text != "" {
			return text
		}
	}
	return compactJSON(raw)
}

// contentItemsText joins the text of content blocks (MCP {"type":"text"} and dynamic tool
// {"type":"inputText"}); other blocks show as "[type]".
func contentItemsText(items []json.RawMessage) string {
	parts := make([]string, 0, len(items))
	for _, raw := range items {
		var c struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if json.Unmarshal(raw, &c) != nil {
			continue
		}
		if c.Type == "text" || c.Type == "inputText" || (c.Type == "" && c.Text != "") {
			parts = append(parts, c.Text)
		} else {
			parts = append(parts, fmt.Sprintf("[%s]", c.Type))
		}
	}
	return strings.Join(parts, "\n")
}
