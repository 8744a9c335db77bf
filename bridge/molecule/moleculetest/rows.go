package moleculetest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"time"
)

// Row is one inbound activity row as the platform stores it (a JSON object). Enqueue gives it an
// id ("act-<n>") unless it has one.
type Row map[string]any

// textParts builds A2A text parts.
func textParts(texts ...string) []any {
	parts := make([]any, len(texts))
	for i, t := range texts {
		parts[i] = map[string]any{"kind": "text", "text": t}
	}
	return parts
}

// messageRow is an a2a_receive row carrying an A2A message/send request.
func messageRow(source any, method string, texts ...string) Row {
	return Row{
		"activity_type": "a2a_receive",
		"method":        method,
		"source_id":     source,
		"request_body": map[string]any{
			"jsonrpc": "2.0",
			"method":  "message/send",
			"params":  map[string]any{"message": map[string]any{"role": "user", "parts": textParts(texts...)}},
		},
		"created_at": time.Now().UTC().Format(time.RFC3339Nano),
	}
}

// CanvasMessage is a message typed by the canvas user (no source_id).
func CanvasMessage(text string) Row { return messageRow(nil, "message/send", text) }

// PeerMessage is a message from the agent of workspace peer.
func PeerMessage(peer, text string) Row {
	return messageRow(peer, "message/send", text).WithPeerInfo(peer+"-agent", "assistant")
}

// MultipartMessage is a peer message (a canvas message when peer is "") whose text comes in
// several text parts, plus a non-text part that must be ignored.
func MultipartMessage(peer string, texts ...string) Row {
	var source any
	if peer != "" {
		source = peer
	}
	r := messageRow(source, "message/send", texts...)
	msg := r["request_body"].(map[string]any)["params"].(map[string]any)["message"].(map[string]any)
	msg["parts"] = append(msg["parts"].([]any), map[string]any{"kind": "data", "data": map[string]any{"x": 1}})
	return r
}

// FileMessage is a canvas message with a text part and a file part holding data inline
// (base64 bytes), as the canvas sends an attached file: {"kind":"file","file":{"name",
// "mimeType","bytes"}}.
func FileMessage(text, name, mimeType string, data []byte) Row {
	return fileMessage(nil, text, name, mimeType, data)
}

// PeerFileMessage is FileMessage from the agent of workspace peer.
func PeerFileMessage(peer, text, name, mimeType string, data []byte) Row {
	return fileMessage(peer, text, name, mimeType, data).WithPeerInfo(peer+"-agent", "assistant")
}

func fileMessage(source any, text, name, mimeType string, data []byte) Row {
	r := messageRow(source, "message/send", text)
	msg := r["request_body"].(map[string]any)["params"].(map[string]any)["message"].(map[string]any)
	msg["parts"] = append(msg["parts"].([]any), map[string]any{"kind": "file", "file": map[string]any{
		"name": name, "mimeType": mimeType, "bytes": base64.StdEncoding.EncodeToString(data)}})
	return r
}

// NotifyEcho is our own notify reply as the platform echoes it into the feed.
func NotifyEcho(text string) Row {
	return Row{"activity_type": "a2a_receive", "method": "notify", "source_id": nil, "summary": text,
		"created_at": time.Now().UTC().Format(time.RFC3339Nano)}
}

// SelfMessage is a row whose source is the workspace itself (a message we sent).
func SelfMessage(ws, text string) Row { return messageRow(ws, "message/send", text) }

// SummaryOnly is a canvas row without parts: the text is in summary.
func SummaryOnly(text string) Row {
	return Row{"activity_type": "a2a_receive", "method": "message/send", "summary": text}
}

// WithID sets the row's id (a string, or a number for numeric ids).
func (r Row) WithID(id any) Row { r["id"] = id; return r }

// WithMessageID sets the A2A messageId of the row's message (params.message.messageId), as the
// canvas sends it: the platform's events name the message by it.
func (r Row) WithMessageID(id string) Row {
	if msg := rowMessage(r); msg != nil {
		msg["messageId"] = id
	}
	return r
}

// WithSeq sets the row's mailbox sequence number.
func (r Row) WithSeq(seq int64) Row { r["seq"] = seq; return r }

// WithPeerInfo sets peer_name and peer_role.
func (r Row) WithPeerInfo(name, role string) Row {
	r["peer_name"] = name
	r["peer_role"] = role
	return r
}

// WithAttachments lists attachments by name.
func (r Row) WithAttachments(names ...string) Row {
	a := make([]any, len(names))
	for i, n := range names {
		a[i] = map[string]any{"name": n, "uri": "https://files.example/" + n}
	}
	r["attachments"] = a
	return r
}

// Enqueue appends rows to the activity feed, oldest first, and returns their ids. Each row
// broadcasts the events the platform's write of such a row broadcasts (rowEventsLocked).
func (p *Platform) Enqueue(rows ...Row) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = p.logRowLocked(r)
	}
	p.changedLocked()
	return ids
}

// logRowLocked stores r and broadcasts its events.
func (p *Platform) logRowLocked(r Row) string {
	id := p.appendLocked(r)
	p.rowEventsLocked(r)
	return id
}

// EnqueueRaw appends rows given as raw JSON. Valid JSON that is not a usable row (an array, a row
// without an id) is poison the inbox moves past; invalid JSON makes the whole activity response
// invalid, which the inbox treats as a failed poll and retries. The id used for since_id is the
// "id" field when the row is an object that has one, else none (such a row can never be a cursor).
func (p *Platform) EnqueueRaw(raw ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range raw {
		var m map[string]any
		id := ""
		if json.Unmarshal([]byte(r), &m) == nil {
			id = idString(m["id"])
		}
		p.rows = append(p.rows, storedRow{id: id, raw: []byte(r), at: p.nowLocked()})
		if m != nil {
			p.rowEventsLocked(m)
		} else {
			p.broadcastLocked(EventActivityLogged, p.bareActivity())
		}
	}
	p.changedLocked()
}

// bareActivity is the ACTIVITY_LOGGED payload of a row the fake cannot read (raw JSON that is
// not an object, a generated row): an a2a_receive row of the workspace, nothing more.
func (p *Platform) bareActivity() map[string]any {
	return activityPayload(Row{"activity_type": "a2a_receive", "target_id": p.cfg.WorkspaceID}, "")
}

// appendLocked stores r, assigning an id when it has none.
func (p *Platform) appendLocked(r Row) string {
	c := make(Row, len(r)+1)
	for k, v := range r {
		c[k] = v
	}
	p.fillContextLocked(c)
	if _, ok := c["id"]; !ok {
		p.nextID++
		c["id"] = "act-" + strconv.Itoa(p.nextID)
	}
	// The platform stamps created_at when it stores the row (microseconds, as Postgres keeps
	// it), and orders and filters by it: since_secs and before_ts compare it.
	at := p.nowLocked()
	c["created_at"] = at.Format(time.RFC3339Nano)
	raw, err := json.Marshal(c)
	if err != nil {
		panic("moleculetest: row is not JSON-encodable: " + err.Error())
	}
	id := idString(c["id"])
	p.rows = append(p.rows, storedRow{id: id, raw: raw, at: at})
	return id
}

func idString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	default:
		return ""
	}
}

// EnqueueStream appends a row whose JSON text open generates each time the row is served, so a
// test can serve a row of any size without holding it in memory. id is the row's cursor for
// since_id; it should be the row's "id" member.
func (p *Platform) EnqueueStream(id string, open func() io.Reader) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rows = append(p.rows, storedRow{id: id, open: open, at: p.nowLocked()})
	p.broadcastLocked(EventActivityLogged, p.bareActivity())
	p.changedLocked()
}

// LargeRow returns an opener for EnqueueStream: a canvas row whose summary is n bytes of 'x'.
// With idLast its "id" member comes after the summary, so a reader has to get past the large
// value to learn the id.
func LargeRow(id string, n int64, idLast bool) func() io.Reader {
	idMember := `"id":` + strconv.Quote(id)
	head := `{"activity_type":"a2a_receive","method":"message/send",`
	tail := `"}`
	if idLast {
		tail = `",` + idMember + `}`
	} else {
		head += idMember + ","
	}
	head += `"summary":"`
	return func() io.Reader {
		return io.MultiReader(strings.NewReader(head), io.LimitReader(filler{}, n), strings.NewReader(tail))
	}
}

// filler reads as an endless run of 'x'.
type filler struct{}

var xs = bytes.Repeat([]byte{'x'}, 32<<10)

func (filler) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		n += copy(p[n:], xs)
	}
	return n, nil
}

// nowLocked is the time a row is stored: microseconds, never before the last row's, so that the
// feed's order (created_at) is the order rows were enqueued in.
func (p *Platform) nowLocked() time.Time {
	at := time.Now().UTC().Truncate(time.Microsecond)
	if n := len(p.rows); n > 0 && at.Before(p.rows[n-1].at) {
		at = p.rows[n-1].at
	}
	return at
}
