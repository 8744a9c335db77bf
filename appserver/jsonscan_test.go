package appserver

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/molecule-ai/codex-warm/internal/protocol"
)

var scanSeeds = []string{
	`{"method":"item/completed","params":{"item":{"type":"agentMessage","id":"m","text":"a \"b\" {c} [d]"},"threadId":"t1","turnId":"u1"},"emittedAtMs":1}`,
	`{"method":"turn/started","params":{"threadId":"t","turn":{"id":"u","items":[],"status":"inProgress"}}}`,
	`{"method":"turn/completed","params":{"threadId":"t","turn":{"id":"u"},"turnId":""}}`,
	`{"method":"m","params":{"threadId":"t","turn":null}}`,
	`{"method":"m","params":{"threadId":"t","turn":{"id":"a"},"turn":{"x":1}}}`,
	`{"method":"m","params":{"threadId":"t","ThreadId":"s"}}`,
	`{"method":"m","params":{"threadId":5}}`,
	`{"method":"m","params":{"threadId":"t\u00e9","turnId":"\"u\""}}`,
	`{"method":"m","params":{"threadId":"t","turn":{"ID":"u"}}}`,
	`{"method":"m","params":{"threadId":"t","turn":{"id":"u","id":"v"}}}`,
	`{"method":"m","params":{"threadId":"a","threadId":"b"}}`,
	`{"\u006dethod":"m","params":{}}`,
	`{"method":"m\u002f","params":{}}`,
	`{"method":"m","method":"n","params":{},"params":{"a":1}}`,
	` { "method" : "m" , "params" : { "threadId" : "t" } , "x" : [ 1 , { } ] } `,
	`{"method":"m","params":{},"ID":1}`,
	`{"method":"m","params":{},"K":1,"\u212a":2}`,
	`{"method":"m","params":{"threadId":"t"},"ſd":1}`,
	`{}`, `[]`, `"x"`, `null`, `{"method":"m","params":{"a":[1,2,{"b":"}"}]}}`,
	"{\"method\":\"m\",\"params\":{\"threadId\":\"bad \xff\"}}",
	`{"item":{"type":"agentMessage","id":"a","text":"x"},"threadId":"t"}`,
	`{"item":{"type":"userMessage","type":"commandExecution"}}`,
	`{"item":null}`, `{"item":{"type":null}}`, `{"item":{"type":3}}`, `{"item":[]}`, `{"Item":{"type":"x"}}`,
	`{"item":{"Type":"x"}}`, `{"item":{"type":"\u0078"}}`, `{"item":{}}`,
}

// FuzzFastScanMatchesDecode: the scanner's plainNotification and routeOf answer as the full
// decodes they stand in for, on any input.
func FuzzFastScanMatchesDecode(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		checkScanMatchesDecode(t, line)
	})
}

// TestFastScanMatchesDecode runs the fuzz seeds, each also as the params of a notification.
func TestFastScanMatchesDecode(t *testing.T) {
	for _, s := range scanSeeds {
		checkScanMatchesDecode(t, []byte(s))
	}
	// The seeds' params take the fast route where they are plain.
	for _, c := range []struct{ params, thread, turn string }{
		{`{"threadId":"t1","turnId":"u1","item":{"id":"x","turn":{"id":"no"}}}`, "t1", "u1"},
		{`{"threadId":"t","turn":{"id":"u","items":[{"id":"i"}]}}`, "t", "u"},
		{`{"turn":{"id":"u"},"turnId":"w"}`, "", "w"},
	} {
		th, tu, ok := routeOfFast([]byte(c.params))
		if !ok || th != c.thread || tu != c.turn {
			t.Errorf("%s: fast route %q %q %v", c.params, th, tu, ok)
		}
	}
}

func checkScanMatchesDecode(t *testing.T, line []byte) {
	t.Helper()
	m1, p1, ok1 := plainNotification(line)
	m2, p2, ok2 := plainNotificationDecode(line)
	if ok1 != ok2 || m1 != m2 || !bytes.Equal(p1, p2) {
		t.Errorf("%q: scan %q %s %v, decode %q %s %v", line, m1, p1, ok1, m2, p2, ok2)
	}
	typ, okScan := ItemType(line)
	var p struct {
		Item struct {
			Type string `json:"type"`
		} `json:"item"`
	}
	okDecode := json.Unmarshal(line, &p) == nil
	if okScan != okDecode || (okDecode && typ != p.Item.Type) {
		t.Errorf("%q: item type %q %v, decode %q %v", line, typ, okScan, p.Item.Type, okDecode)
	}
	th1, tu1 := routeOf(line)
	th2, tu2 := routeOfDecode(line)
	if th1 != th2 || tu1 != tu2 {
		t.Errorf("%q: route %q %q, decode %q %q", line, th1, tu1, th2, tu2)
	}
	if ok2 {
		th1, tu1 = routeOf(p2)
		th2, tu2 = routeOfDecode(p2)
		if th1 != th2 || tu1 != tu2 {
			t.Errorf("%q: route %q %q, decode %q %q", p2, th1, tu1, th2, tu2)
		}
	}
}

// BenchmarkRouteOf compares learning a recorded item/completed notification's thread and turn
// by the full decode and by the scanner.
func BenchmarkRouteOf(b *testing.B) {
	params := []byte(`{"item":{"type":"agentMessage","id":"msg_0001","text":"Hello from the mock model, turn 12.","phase":"final_answer","memoryCitation":null},"threadId":"01a218b6-380d-7af1-87d2-5678e229f9f3","turnId":"01a218b6-392d-71e1-a56b-c2d5a13116e9","completedAtMs":1795710925270}`)
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if th, _ := routeOfDecode(params); th == "" {
				b.Fatal("no thread")
			}
		}
	})
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if th, _ := routeOf(params); th == "" {
				b.Fatal("no thread")
			}
		}
	})
}

// TestNoteFileChangeFilter: the item/started of a file change is noted however its type is
// written, and other items are passed over.
func TestNoteFileChangeFilter(t *testing.T) {
	var ts turnState
	for _, p := range []string{
		`{"threadId":"t","turnId":"u","item":{"type":"fileChange","id":"a","changes":[{"path":"x.go","kind":{"type":"add"},"diff":""}]}}`,
		`{"threadId":"t","turnId":"u","item":{"type":"\u0066ileChange","id":"b","changes":[]}}`,
		`{"threadId":"t","turnId":"u","item":{"type":"agentMessage","id":"c","text":"hi"}}`,
	} {
		ts.noteFileChange(protocol.Notification{Method: protocol.NotifyItemStarted, Params: []byte(p)})
	}
	if _, ok := ts.files["a"]; !ok || len(ts.files["a"]) != 1 {
		t.Errorf("plain fileChange not noted: %v", ts.files)
	}
	if _, ok := ts.files["b"]; !ok {
		t.Errorf("escaped fileChange not noted: %v", ts.files)
	}
	if _, ok := ts.files["c"]; ok || len(ts.files) != 2 {
		t.Errorf("files %v", ts.files)
	}
}
