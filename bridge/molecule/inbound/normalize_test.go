package inbound

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/molecule-ai/codex-warm/bridge/molecule/ledger"
)

const testWS = "ws-self"

// minTextCap is the inbox's floor for MaxTextBytes: room for the truncation note.
const minTextCap = 256

func normCfg() Config { return Config{WorkspaceID: testWS, MaxTextBytes: 1024} }

func TestNormalize(t *testing.T) {
	t.Parallel()
	msgParts := func(parts string) string {
		return `{"params":{"message":{"role":"user","parts":` + parts + `}}}`
	}
	tests := []struct {
		name     string
		row      string
		disp     Disposition
		id       string
		Kind     Kind
		key      string
		route    ledger.Route
		text     string
		peerName string
		seq      int64
	}{
		{
			name: "canvas user",
			row:  `{"id":"a1","method":"message/send","request_body":` + msgParts(`[{"kind":"text","text":"hi"}]`) + `,"created_at":"2026-01-01T00:00:00Z"}`,
			disp: DispMessage, id: "a1", Kind: KindCanvasUser, key: "canvas:" + testWS,
			route: ledger.Route{Kind: RouteNotify, Workspace: testWS}, text: "hi",
		},
		{
			name: "peer agent with peer info and seq",
			row:  `{"id":"a2","seq":17,"source_id":"peer-1","peer_name":"Bob","peer_role":"reviewer","request_body":` + msgParts(`[{"kind":"text","text":"status?"}]`) + `}`,
			disp: DispMessage, id: "a2", Kind: KindPeerAgent, key: "peer:peer-1",
			route: ledger.Route{Kind: RouteA2A, Workspace: "peer-1"}, text: "status?", peerName: "Bob", seq: 17,
		},
		{
			name: "multipart joined with newlines, type or kind, non-text ignored",
			row:  `{"id":"a3","request_body":` + msgParts(`[{"kind":"text","text":"one"},{"type":"text","text":"two"},{"kind":"data","data":{}},{"kind":"text","text":"three"}]`) + `}`,
			disp: DispMessage, id: "a3", Kind: KindCanvasUser, key: "canvas:" + testWS,
			route: ledger.Route{Kind: RouteNotify, Workspace: testWS}, text: "one\ntwo\nthree",
		},
		{
			name: "params.parts fallback",
			row:  `{"id":"a4","request_body":{"params":{"parts":[{"kind":"text","text":"pp"}]}}}`,
			disp: DispMessage, id: "a4", Kind: KindCanvasUser, key: "canvas:" + testWS, route: ledger.Route{Kind: RouteNotify, Workspace: testWS}, text: "pp",
		},
		{
			name: "top-level parts fallback",
			row:  `{"id":"a5","request_body":{"parts":[{"type":"text","text":"tp"}]}}`,
			disp: DispMessage, id: "a5", Kind: KindCanvasUser, key: "canvas:" + testWS, route: ledger.Route{Kind: RouteNotify, Workspace: testWS}, text: "tp",
		},
		{
			name: "request_body as a JSON string",
			row:  `{"id":"a6","request_body":"{\"params\":{\"message\":{\"parts\":[{\"kind\":\"text\",\"text\":\"str\"}]}}}"}`,
			disp: DispMessage, id: "a6", Kind: KindCanvasUser, key: "canvas:" + testWS, route: ledger.Route{Kind: RouteNotify, Workspace: testWS}, text: "str",
		},
		{
			name: "summary fallback",
			row:  `{"id":"a7","summary":"from summary"}`,
			disp: DispMessage, id: "a7", Kind: KindCanvasUser, key: "canvas:" + testWS, route: ledger.Route{Kind: RouteNotify, Workspace: testWS}, text: "from summary",
		},
		{
			name: "numeric id kept as written",
			row:  `{"id":12345678901234567890,"summary":"n"}`,
			disp: DispMessage, id: "12345678901234567890", Kind: KindCanvasUser, key: "canvas:" + testWS, route: ledger.Route{Kind: RouteNotify, Workspace: testWS}, text: "n",
		},
		{
			name: "delegation result of an older platform (callee as source, text in summary): callee's thread, reply to canvas",
			row:  `{"id":"a8","method":"delegate_result","source_id":"peer-2","summary":"done"}`,
			disp: DispMessage, id: "a8", Kind: KindDelegationResult, key: "peer:peer-2", route: ledger.Route{Kind: RouteNotify, Workspace: testWS},
			text: "Result of the work delegated to workspace peer-2:\n\ndone",
		},
		{
			name: "delegation result without a callee gets a one-off key",
			row:  `{"id":"a9","method":"delegate_result","source_id":"` + testWS + `","summary":"Delegation result delivered","response_body":{"text":"done","delegation_id":"d-9"}}`,
			disp: DispMessage, id: "a9", Kind: KindDelegationResult, key: "oneoff:a9", route: ledger.Route{Kind: RouteNotify, Workspace: testWS},
			text: "Result of the work delegated to another workspace (delegation d-9):\n\ndone",
		},
		{
			name: "attachments noted in the text",
			row:  `{"id":"a11","summary":"see files","attachments":[{"name":"a.png"},"b.txt",{"uri":"https://x/y"}]}`,
			disp: DispMessage, id: "a11", Kind: KindCanvasUser, key: "canvas:" + testWS, route: ledger.Route{Kind: RouteNotify, Workspace: testWS},
			text: "see files\n\n[attachments: a.png, b.txt, https://x/y]",
		},
		{
			name: "attachments only",
			row:  `{"id":"a12","request_body":` + msgParts(`[{"kind":"file","file":{"name":"report.pdf"}}]`) + `}`,
			disp: DispMessage, id: "a12", Kind: KindCanvasUser, key: "canvas:" + testWS, route: ledger.Route{Kind: RouteNotify, Workspace: testWS},
			text: "[attachments: report.pdf]",
		},
		{name: "notify echo", row: `{"id":"e1","method":"notify","source_id":null,"summary":"our reply"}`, disp: DispEcho, id: "e1"},
		{name: "own row", row: `{"id":"e2","method":"message/send","source_id":"` + testWS + `","summary":"x"}`, disp: DispEcho, id: "e2"},
		{name: "not an object", row: `[1,2]`, disp: DispPoison},
		{name: "invalid JSON", row: `{"id":`, disp: DispPoison},
		{name: "no id", row: `{"summary":"x"}`, disp: DispPoison},
		{name: "empty id", row: `{"id":"","summary":"x"}`, disp: DispPoison},
		{name: "object id", row: `{"id":{"x":1},"summary":"x"}`, disp: DispPoison},
		{name: "unknown activity type", row: `{"id":"p1","activity_type":"task_update","summary":"x"}`, disp: DispPoison, id: "p1"},
		{name: "peer id not routable", row: `{"id":"p2","source_id":"../etc","summary":"x"}`, disp: DispPoison, id: "p2"},
		{name: "no text", row: `{"id":"p3","request_body":` + msgParts(`[]`) + `}`, disp: DispPoison, id: "p3"},
		{name: "whitespace text", row: `{"id":"p4","summary":"  \n "}`, disp: DispPoison, id: "p4"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := Normalize([]byte(tc.row), normCfg())
			if n.Disp != tc.disp {
				t.Fatalf("disposition = %s (%s), want %s", n.Disp, n.Reason, tc.disp)
			}
			if n.Msg.ActivityID != tc.id {
				t.Errorf("id = %q, want %q", n.Msg.ActivityID, tc.id)
			}
			if tc.disp != DispMessage {
				if n.Reason == "" {
					t.Errorf("no reason given")
				}
				return
			}
			m := n.Msg
			if m.Kind != tc.Kind || m.ChatKey != tc.key || m.Route != tc.route || m.Text != tc.text || m.PeerName != tc.peerName || m.Seq != tc.seq {
				t.Errorf("got kind=%s key=%q route=%+v text=%q peer_name=%q seq=%d\nwant kind=%s key=%q route=%+v text=%q peer_name=%q seq=%d",
					m.Kind, m.ChatKey, m.Route, m.Text, m.PeerName, m.Seq, tc.Kind, tc.key, tc.route, tc.text, tc.peerName, tc.seq)
			}
		})
	}
}

func TestNormalizeCapsText(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("ab€", 1000) // 5000 bytes, multi-byte runes
	row, _ := json.Marshal(map[string]any{"id": "big", "summary": long, "attachments": []string{"x.log"}})
	n := Normalize(row, Config{WorkspaceID: testWS, MaxTextBytes: 512})
	if n.Disp != DispMessage {
		t.Fatalf("disposition %s: %s", n.Disp, n.Reason)
	}
	text := n.Msg.Text
	if len(text) > 512 || !utf8.ValidString(text) {
		t.Fatalf("text is %d bytes (valid UTF-8: %v)", len(text), utf8.ValidString(text))
	}
	if !strings.Contains(text, "[message truncated: ") || !strings.HasSuffix(text, "[attachments: x.log]") {
		t.Fatalf("text lacks the truncation note or the attachment note: %q", text[len(text)-100:])
	}
	if n.Msg.OmittedBytes <= 0 || n.Msg.OmittedBytes >= len(long) {
		t.Errorf("omitted = %d", n.Msg.OmittedBytes)
	}
}

func TestOneoffKeyOfUnsafeID(t *testing.T) {
	t.Parallel()
	k := OneoffKey("weird id/with spaces")
	if !strings.HasPrefix(k, "oneoff:") || strings.ContainsAny(k, " /") || k != OneoffKey("weird id/with spaces") {
		t.Fatalf("oneoff key %q", k)
	}
}

// FuzzNormalize: no panic on any row; a message has an id, a chat key, a route to a valid
// workspace, and valid UTF-8 text within the cap.
func FuzzNormalize(f *testing.F) {
	seeds := []string{
		`{"id":"a1","request_body":{"params":{"message":{"parts":[{"kind":"text","text":"hi"}]}}}}`,
		`{"id":1,"source_id":"peer-1","summary":"x","attachments":[{"name":"a"}]}`,
		`{"id":"d","method":"delegate_result","source_id":"peer-2","summary":"done"}`,
		`{"id":"e","method":"notify","summary":"echo"}`,
		`{"id":"s","request_body":"{\"parts\":[{\"type\":\"text\",\"text\":\"q\"}]}"}`,
		`{"id":"bad\xff","summary":"\xff\xfe"}`,
		`[]`, `null`, `"x"`, `{"id":{}}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s), 300)
	}
	f.Fuzz(func(t *testing.T, row []byte, limit int) {
		limit = minTextCap + abs(limit)%4096
		n := Normalize(row, Config{WorkspaceID: testWS, MaxTextBytes: limit})
		if n.Disp != DispMessage {
			if n.Reason == "" {
				t.Fatalf("%s without reason", n.Disp)
			}
			return
		}
		m := n.Msg
		if m.ActivityID == "" || m.ChatKey == "" {
			t.Fatalf("message without id or chat key: %+v", m)
		}
		if !ValidWorkspaceID(m.Route.Workspace) || (m.Route.Kind != RouteNotify && m.Route.Kind != RouteA2A) {
			t.Fatalf("unroutable message: %+v", m.Route)
		}
		if !utf8.ValidString(m.Text) || len(m.Text) > limit || strings.TrimSpace(m.Text) == "" {
			t.Fatalf("text invalid, over %d bytes or empty: %d bytes %q", limit, len(m.Text), m.Text)
		}
		if m.Kind == KindPeerAgent && m.ChatKey != "peer:"+m.PeerID {
			t.Fatalf("peer message keyed %q", m.ChatKey)
		}
	})
}

func abs(n int) int {
	if n < 0 {
		if n == -n { // math.MinInt
			return 0
		}
		return -n
	}
	return n
}
