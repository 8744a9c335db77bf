package projector

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// wireLine is one line of a recorded transcript in testdata/codex-wire.
type wireLine struct {
	Dir string `json:"dir"`
	Msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	} `json:"msg"`
}

// loadTurns splits a recorded session into turns: the notifications received from each sent
// turn/start up to and including the turn/completed that follows it. Server requests (which
// carry an id) and responses are not notifications and are left out.
func loadTurns(t testing.TB, name string) [][]protocol.Notification {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "testdata", "codex-wire", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var turns [][]protocol.Notification
	var cur []protocol.Notification
	inTurn := false
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var l wireLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		switch {
		case l.Dir == "send" && l.Msg.Method == protocol.MethodTurnStart:
			inTurn, cur = true, nil
		case l.Dir == "recv" && inTurn && l.Msg.Method != "" && len(l.Msg.ID) == 0:
			cur = append(cur, protocol.Notification{Method: l.Msg.Method, Params: l.Msg.Params})
			if l.Msg.Method == protocol.NotifyTurnCompleted {
				turns = append(turns, cur)
				inTurn = false
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return turns
}

func TestProjectRecordedTurns(t *testing.T) {
	const (
		twoThread     = "01a1fd80-b525-7b83-b606-b61215897848"
		approvalTurn  = "01a1fd80-b82b-7d53-9eae-2c613232716f"
		declinedReply = "tool said: exec_command failed: CreateProcess { message: \"Rejected(\\\"rejected by user\\\")\" }"
	)
	oneCall := Usage{InputTokens: 1, OutputTokens: 1, TotalTokens: 2}
	tests := []struct {
		file string
		turn int
		want Projection
	}{
		{
			file: "two-turns.jsonl", turn: 0,
			want: Projection{
				ThreadID: twoThread, Status: protocol.TurnCompleted, Completed: true,
				Reply: "echo: hello there", Usage: oneCall,
			},
		},
		{
			file: "two-turns.jsonl", turn: 1,
			want: Projection{
				ThreadID: twoThread, TurnID: "01a1fd80-b5e2-7670-b19c-1592410d4f3b", Status: protocol.TurnCompleted,
				Completed: true, Reply: "echo: second message", Usage: oneCall,
			},
		},
		{
			file: "approval-declined.jsonl", turn: 0,
			want: Projection{
				ThreadID: "01a1fd80-b817-71c0-ab76-e0ae23a5478e", TurnID: approvalTurn,
				Status: protocol.TurnCompleted, Completed: true, Reply: declinedReply,
				// Two model calls (the tool call, then the answer): the sum of both `last`s.
				Usage: Usage{InputTokens: 2, OutputTokens: 2, TotalTokens: 4},
			},
		},
		{
			file: "model-error-failed-turn.jsonl", turn: 0,
			want: Projection{
				ThreadID: "01a1fd80-bab8-7fc0-94d3-39682e36a289", TurnID: "01a1fd80-bac5-7cd3-b809-b836c1cddab6",
				Status: protocol.TurnFailed, Completed: true,
				Error: &protocol.TurnError{
					Message:        "We\u2019re currently experiencing high demand, which may cause temporary errors.",
					CodexErrorInfo: json.RawMessage(`"internalServerError"`),
				},
			},
		},
		{
			file: "wedged-turn-interrupted.jsonl", turn: 0,
			want: Projection{
				ThreadID: "01a1fd80-bce6-7c62-8a31-f2210825a70f", TurnID: "01a1fd80-bcf1-7823-b7a3-8722ba954d57",
				Status: protocol.TurnInterrupted, Completed: true,
			},
		},
		{
			file: "wedged-turn-interrupted.jsonl", turn: 1,
			want: Projection{
				ThreadID: "01a1fd80-bce6-7c62-8a31-f2210825a70f", TurnID: "01a1fd80-ccc4-7f93-9830-744d78320175",
				Status: protocol.TurnCompleted, Completed: true, Reply: "echo: hello after hang", Usage: oneCall,
			},
		},
	}
	for _, tt := range tests {
		t.Run(strings.TrimSuffix(tt.file, ".jsonl")+"/"+string(rune('1'+tt.turn)), func(t *testing.T) {
			turns := loadTurns(t, tt.file)
			if tt.turn >= len(turns) {
				t.Fatalf("%s has %d turns", tt.file, len(turns))
			}
			got := Project(turns[tt.turn])
			want := tt.want
			// Cases that leave IDs out check everything but the IDs (checked elsewhere).
			if want.TurnID == "" {
				want.TurnID = got.TurnID
				if got.TurnID == "" {
					t.Error("no turn id")
				}
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got  %s\nwant %s", dump(got), dump(want))
			}
		})
	}
}

// TestProjectWholeSessionTakesLastTurn feeds every notification of a two-turn session: the
// projection is the last turn's, with nothing of the first mixed in.
func TestProjectWholeSessionTakesLastTurn(t *testing.T) {
	turns := loadTurns(t, "two-turns.jsonl")
	var all []protocol.Notification
	for _, turn := range turns {
		all = append(all, turn...)
	}
	if got, want := Project(all), Project(turns[1]); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %s\nwant %s", dump(got), dump(want))
	}
}

func dump(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

// Builders for synthetic notifications.

const (
	tThread = "thr"
	tTurn   = "turn-1"
)

func notif(method string, params any) protocol.Notification {
	b, err := json.Marshal(params)
	if err != nil {
		panic(err)
	}
	return protocol.Notification{Method: method, Params: b}
}

func turnStarted(turnID string) protocol.Notification {
	return notif(protocol.NotifyTurnStarted, map[string]any{"threadId": tThread,
		"turn": map[string]any{"id": turnID, "status": "inProgress", "items": []any{}}})
}

func turnCompleted(turnID, status string, errObj any, items ...map[string]any) protocol.Notification {
	if items == nil {
		items = []map[string]any{}
	}
	return notif(protocol.NotifyTurnCompleted, map[string]any{"threadId": tThread,
		"turn": map[string]any{"id": turnID, "status": status, "error": errObj, "items": items}})
}

func itemN(method string, item map[string]any) protocol.Notification {
	return notif(method, map[string]any{"threadId": tThread, "turnId": tTurn, "item": item})
}

func started(item map[string]any) protocol.Notification {
	return itemN(protocol.NotifyItemStarted, item)
}

func completed(item map[string]any) protocol.Notification {
	return itemN(protocol.NotifyItemCompleted, item)
}

func userMsg(id, text string) map[string]any {
	return map[string]any{"type": "userMessage", "id": id, "content": []any{map[string]any{"type": "text", "text": text}}}
}

func agentMsg(id, text string, phase any) map[string]any {
	return map[string]any{"type": "agentMessage", "id": id, "text": text, "phase": phase}
}

func usageN(turnID string, last, total int64) protocol.Notification {
	b := func(n int64) map[string]any {
		return map[string]any{"totalTokens": n, "inputTokens": n - 1, "cachedInputTokens": 1, "outputTokens": 1, "reasoningOutputTokens": 0}
	}
	return notif(protocol.NotifyTokenUsageUpdated, map[string]any{"threadId": tThread, "turnId": turnID,
		"tokenUsage": map[string]any{"total": b(total), "last": b(last)}})
}

func TestProjectSynthetic(t *testing.T) {
	tests := []struct {
		name   string
		notifs []protocol.Notification
		check  func(t *testing.T, p Projection)
	}{
		{
			name: "final answer wins over later commentary",
			notifs: []protocol.Notification{
				turnStarted(tTurn),
				completed(agentMsg("a1", "thinking out loud", "commentary")),
				completed(agentMsg("a2", "the answer", "final_answer")),
				completed(agentMsg("a3", "one more remark", "commentary")),
				turnCompleted(tTurn, "completed", nil),
			},
			check: func(t *testing.T, p Projection) {
				wantReply(t, p, "the answer")
			},
		},
		{
			name: "without final answer the last completed message wins",
			notifs: []protocol.Notification{
				turnStarted(tTurn),
				completed(agentMsg("a1", "first", "commentary")),
				completed(agentMsg("a2", "second", nil)),
				started(agentMsg("a3", "never completed", nil)),
				turnCompleted(tTurn, "completed", nil),
			},
			check: func(t *testing.T, p Projection) {
				wantReply(t, p, "second")
			},
		},
		{
			name: "no agent message at all",
			notifs: []protocol.Notification{
				turnStarted(tTurn),
				completed(userMsg("u1", "hi")),
				turnCompleted(tTurn, "completed", nil),
			},
			check: func(t *testing.T, p Projection) {
				wantReply(t, p, "")
				if p.Status != protocol.TurnCompleted || !p.Completed {
					t.Errorf("projection %s", dump(p))
				}
			},
		},
		{
			name: "turn.items is the fallback source when item/completed is missing",
			notifs: []protocol.Notification{
				turnStarted(tTurn),
				completed(userMsg("u1", "hi")),
				started(agentMsg("a1", "", nil)),
				turnCompleted(tTurn, "completed", nil, agentMsg("a1", "from turn items", "final_answer")),
			},
			check: func(t *testing.T, p Projection) {
				wantReply(t, p, "from turn items")
			},
		},
		{
			name: "turn.items do not override completed items",
			notifs: []protocol.Notification{
				turnStarted(tTurn),
				completed(agentMsg("a1", "streamed text", nil)),
				turnCompleted(tTurn, "completed", nil, agentMsg("a1", "summary text", nil)),
			},
			check: func(t *testing.T, p Projection) {
				wantReply(t, p, "streamed text")
			},
		},
		{
			name: "unknown and non-message item types are tolerated",
			notifs: []protocol.Notification{
				turnStarted(tTurn),
				started(map[string]any{"type": "reasoning", "id": "r1", "summary": []any{}}),
				completed(map[string]any{"type": "reasoning", "id": "r1", "summary": []any{"x"}}),
				completed(map[string]any{"type": "hologram", "id": "h1", "payload": map[string]any{"a": 1}}),
				completed(map[string]any{"id": "no-type"}),
				completed(map[string]any{"type": "agentMessage", "id": "a1", "text": 42}), // wrong field type
				completed(agentMsg("a2", "ok", nil)),
				notif("some/new/notification", map[string]any{"x": 1}),
				turnCompleted(tTurn, "completed", nil),
			},
			check: func(t *testing.T, p Projection) {
				wantReply(t, p, "ok")
			},
		},
		{
			name: "turn_aborted marker never becomes the reply",
			notifs: []protocol.Notification{
				turnStarted(tTurn),
				completed(agentMsg("a1", "partial work done", nil)),
				completed(agentMsg("a2", "<turn_aborted>\nThe user interrupted the turn.\n</turn_aborted>", nil)),
				turnCompleted(tTurn, "interrupted", nil),
			},
			check: func(t *testing.T, p Projection) {
				wantReply(t, p, "partial work done")
			},
		},
		{
			name: "text around the marker survives",
			notifs: []protocol.Notification{
				completed(agentMsg("a1", "before <turn_aborted>gone</turn_aborted> after", "final_answer")),
				completed(agentMsg("a2", "<turn_aborted> unclosed to the end", "final_answer")),
			},
			check: func(t *testing.T, p Projection) {
				wantReply(t, p, "before  after")
			},
		},
		{
			name: "tool items never become the reply",
			notifs: []protocol.Notification{
				turnStarted(tTurn),
				completed(agentMsg("a1", "here you go", "final_answer")),
				completed(map[string]any{"type": "fileChange", "id": "fc1", "status": "completed", "changes": []any{
					map[string]any{"path": "/w/new.txt", "kind": map[string]any{"type": "add"}, "diff": "+x"},
				}}),
				completed(map[string]any{"type": "mcpToolCall", "id": "m1", "server": "docs", "tool": "search",
					"status": "completed", "arguments": map[string]any{"q": "go"},
					"result": map[string]any{"content": []any{map[string]any{"type": "text", "text": "found 3"}}}, "error": nil}),
				completed(map[string]any{"type": "dynamicToolCall", "id": "d1", "namespace": "crm", "tool": "lookup",
					"status": "completed", "arguments": map[string]any{"id": 7}, "success": true,
					"contentItems": []any{map[string]any{"type": "inputText", "text": "Ada"}}}),
				turnCompleted(tTurn, "completed", nil),
			},
			check: func(t *testing.T, p Projection) {
				wantReply(t, p, "here you go")
			},
		},
		{
			name: "a turn without turn/completed is in progress",
			notifs: []protocol.Notification{
				turnStarted(tTurn),
				started(map[string]any{"type": "commandExecution", "id": "c1", "command": "ls", "status": "inProgress",
					"aggregatedOutput": nil, "exitCode": nil}),
				completed(map[string]any{"type": "commandExecution", "id": "c1", "command": "ls", "status": "completed",
					"aggregatedOutput": "a\nb\n", "exitCode": 0}),
				started(map[string]any{"type": "commandExecution", "id": "c2", "command": "sleep 999", "status": "inProgress"}),
			},
			check: func(t *testing.T, p Projection) {
				wantReply(t, p, "")
				if p.Status != protocol.TurnInProgress || p.Completed || p.TurnID != tTurn || p.ThreadID != tThread {
					t.Errorf("turn fields %s", dump(p))
				}
			},
		},
		{
			name: "items without ids count only when completed",
			notifs: []protocol.Notification{
				turnStarted(tTurn),
				completed(userMsg("", "hello")),
				completed(agentMsg("", "hi there", nil)),
				started(agentMsg("", "ignored: unmatchable start", nil)),
				turnCompleted(tTurn, "completed", nil),
			},
			check: func(t *testing.T, p Projection) {
				wantReply(t, p, "hi there")
			},
		},
		{
			name: "usage sums last over the turn and ignores other turns",
			notifs: []protocol.Notification{
				turnStarted(tTurn),
				usageN(tTurn, 10, 110),
				usageN("other-turn", 1000, 1000),
				usageN(tTurn, 5, 115),
				turnCompleted(tTurn, "completed", nil),
			},
			check: func(t *testing.T, p Projection) {
				want := Usage{InputTokens: 13, CachedInputTokens: 2, OutputTokens: 2, TotalTokens: 15}
				if p.Usage != want {
					t.Errorf("usage %+v, want %+v", p.Usage, want)
				}
			},
		},
		{
			name: "error notification fills Error only when final and turn has none",
			notifs: []protocol.Notification{
				turnStarted(tTurn),
				notif(protocol.NotifyError, map[string]any{"error": map[string]any{"message": "retrying"}, "willRetry": true, "turnId": tTurn}),
				notif(protocol.NotifyError, map[string]any{"error": map[string]any{"message": "stream died", "codexErrorInfo": map[string]any{"responseStreamDisconnected": map[string]any{}}}, "willRetry": false, "turnId": tTurn}),
				turnCompleted(tTurn, "failed", nil),
			},
			check: func(t *testing.T, p Projection) {
				if p.Status != "failed" || p.Error == nil || p.Error.Message != "stream died" {
					t.Errorf("status %q error %+v", p.Status, p.Error)
				}
			},
		},
		{
			name: "turn error wins over error notification",
			notifs: []protocol.Notification{
				notif(protocol.NotifyError, map[string]any{"error": map[string]any{"message": "from notification"}, "willRetry": false}),
				turnCompleted(tTurn, "failed", map[string]any{"message": "from turn"}),
			},
			check: func(t *testing.T, p Projection) {
				if p.Error == nil || p.Error.Message != "from turn" {
					t.Errorf("error %+v", p.Error)
				}
			},
		},
		{
			name: "only transient errors: no Error",
			notifs: []protocol.Notification{
				notif(protocol.NotifyError, map[string]any{"error": map[string]any{"message": "retrying"}, "willRetry": true}),
				turnCompleted(tTurn, "completed", nil),
			},
			check: func(t *testing.T, p Projection) {
				if p.Error != nil {
					t.Errorf("error %+v", p.Error)
				}
			},
		},
		{
			name:   "nothing at all",
			notifs: nil,
			check: func(t *testing.T, p Projection) {
				if !reflect.DeepEqual(p, Projection{}) {
					t.Errorf("got %s", dump(p))
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.check(t, Project(tt.notifs))
		})
	}
}

func wantReply(t *testing.T, p Projection, want string) {
	t.Helper()
	if p.Reply != want {
		t.Errorf("reply %q, want %q", p.Reply, want)
	}
}

func TestProjectIsDeterministic(t *testing.T) {
	for _, file := range []string{"two-turns.jsonl", "approval-declined.jsonl", "model-error-failed-turn.jsonl", "wedged-turn-interrupted.jsonl"} {
		for i, turn := range loadTurns(t, file) {
			a, b := Project(turn), Project(turn)
			if !reflect.DeepEqual(a, b) {
				t.Errorf("%s turn %d: two projections differ:\n%s\n%s", file, i, dump(a), dump(b))
			}
		}
	}
}

// FuzzProject feeds arbitrary params to every method the projector reads. It must not panic,
// must be deterministic, and must keep its invariants.
func FuzzProject(f *testing.F) {
	methods := []string{
		protocol.NotifyTurnStarted, protocol.NotifyTurnCompleted, protocol.NotifyItemStarted,
		protocol.NotifyItemCompleted, protocol.NotifyTokenUsageUpdated, protocol.NotifyError, "other",
	}
	for _, file := range []string{"two-turns.jsonl", "approval-declined.jsonl", "model-error-failed-turn.jsonl"} {
		for _, turn := range loadTurns(f, file) {
			for _, n := range turn {
				for i, m := range methods {
					if m == n.Method {
						f.Add(byte(i), []byte(n.Params), []byte(nil))
					}
				}
			}
		}
	}
	f.Add(byte(3), []byte(`{"item":{"type":"agentMessage","id":"a","text":"<turn_aborted>x"}}`), []byte(`{"turn":{"id":"t","items":[{"type":"agentMessage"}]}}`))
	f.Add(byte(1), []byte(`{"turn":{"id":"","items":[null,1,"x",{"type":"fileChange","changes":[{"kind":7}]}]}}`), []byte(`null`))
	f.Fuzz(func(t *testing.T, m byte, params, params2 []byte) {
		method := methods[int(m)%len(methods)]
		notifs := []protocol.Notification{
			{Method: method, Params: params},
			{Method: methods[(int(m)+3)%len(methods)], Params: params2},
			{Method: method, Params: params2},
		}
		a := Project(notifs)
		if b := Project(notifs); !reflect.DeepEqual(a, b) {
			t.Fatalf("not deterministic:\n%s\n%s", dump(a), dump(b))
		}
		if strings.Contains(a.Reply, AbortedMarker) {
			t.Fatalf("reply carries the abort marker: %q", a.Reply)
		}
	})
}
