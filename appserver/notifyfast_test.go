package appserver

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/sourcegraph/jsonrpc2"
)

// viaJSONRPC2 is what jsonrpc2 makes of line when it reads it as a request: the path every
// message took before the fast path.
func viaJSONRPC2(t *testing.T, line []byte) (method string, params any, notif bool) {
	t.Helper()
	var req jsonrpc2.Request
	if err := json.Unmarshal(line, &req); err != nil {
		t.Fatalf("jsonrpc2 rejects %s: %v", line, err)
	}
	if req.Params != nil {
		if err := json.Unmarshal(*req.Params, &params); err != nil {
			t.Fatal(err)
		}
	}
	return req.Method, params, req.Notif
}

// TestPlainNotificationMatchesJSONRPC2 reads every notification of the recorded codex
// transcripts through the fast path and through jsonrpc2: same method, same params, and no
// recorded request or response is taken by the fast path.
func TestPlainNotificationMatchesJSONRPC2(t *testing.T) {
	files, err := filepath.Glob("../testdata/codex-wire/*.jsonl")
	if err != nil || len(files) == 0 {
		t.Fatalf("transcripts: %v %v", files, err)
	}
	taken := 0
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var rec struct {
				Dir string          `json:"dir"`
				Msg json.RawMessage `json:"msg"`
			}
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if rec.Dir != "recv" {
				continue
			}
			var probe map[string]json.RawMessage
			if err := json.Unmarshal(rec.Msg, &probe); err != nil {
				t.Fatal(err)
			}
			_, hasID := probe["id"]
			method, params, ok := plainNotification(rec.Msg)
			if hasID {
				if ok {
					t.Errorf("%s: the fast path took a request or response: %s", f, rec.Msg)
				}
				continue
			}
			if !ok {
				t.Errorf("%s: the fast path left a plain notification to jsonrpc2: %s", f, rec.Msg)
				continue
			}
			taken++
			wantMethod, wantParams, notif := viaJSONRPC2(t, rec.Msg)
			var gotParams any
			if err := json.Unmarshal(params, &gotParams); err != nil {
				t.Fatal(err)
			}
			if !notif || method != wantMethod || !reflect.DeepEqual(gotParams, wantParams) {
				t.Errorf("%s: fast path %q %v, jsonrpc2 %q %v (notification %v)", f, method, gotParams, wantMethod, wantParams, notif)
			}
		}
		fh.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	if taken < 10 {
		t.Errorf("only %d notifications went through the fast path", taken)
	}
}

// TestPlainNotificationLeavesTheRestToJSONRPC2: every line that is not a plain notification
// goes on to jsonrpc2, whose answer (an error, a request, a quirk) the hostile tests pin.
func TestPlainNotificationLeavesTheRestToJSONRPC2(t *testing.T) {
	for _, line := range []string{
		`{"id":1,"method":"item/tool/requestUserInput","params":{}}`,
		`{"id":null,"method":"item/tool/requestUserInput","params":{}}`,
		`{"id":1,"result":{}}`,
		`{"method":"turn/started","params":{},"result":{}}`,
		`{"method":"turn/started","params":{},"error":{"code":1,"message":"x"}}`,
		`{"method":"turn/started","params":{},"meta":{}}`,
		`{"method":"turn/started","params":{},"ID":3}`,
		`{"Method":"turn/started","params":{}}`,
		`{"method":"turn/started","Params":{}}`,
		`{"method":"turn/started"}`,
		`{"method":"turn/started","params":null}`,
		`{"method":"turn/started","params":[1]}`,
		`{"method":5,"params":{}}`,
		`{"method":"","params":{}}`,
		`{"params":{}}`,
		`[{"method":"turn/started","params":{}}]`,
		`{"method":"turn/started","params":{}`,
		`not json`,
	} {
		if m, p, ok := plainNotification([]byte(line)); ok {
			t.Errorf("%s: taken by the fast path as %q %s", line, m, p)
		}
	}
	// Members jsonrpc2 ignores do not matter.
	m, p, ok := plainNotification([]byte(`{"jsonrpc":"2.0","method":"turn/started","params":{"id":"x","threadId":"t"},"emittedAtMs":1}`))
	if !ok || m != "turn/started" || string(p) != `{"id":"x","threadId":"t"}` {
		t.Errorf("got %q %s %v", m, p, ok)
	}
}

// BenchmarkReadNotification compares reading one recorded item/completed notification through
// jsonrpc2, through the fast path's full decode of the members, and through its scanner.
func BenchmarkReadNotification(b *testing.B) {
	line := []byte(`{"method":"item/completed","params":{"item":{"type":"agentMessage","id":"msg_0001","text":"Hello from the mock model, turn 12.","phase":"final_answer","memoryCitation":null},"threadId":"01a218b6-380d-7af1-87d2-5678e229f9f3","turnId":"01a218b6-392d-71e1-a56b-c2d5a13116e9","completedAtMs":1795710925270},"emittedAtMs":1795710925270}`)
	b.Run("jsonrpc2", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req jsonrpc2.Request
			if err := json.Unmarshal(line, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, ok := plainNotificationDecode(line); !ok {
				b.Fatal("not taken")
			}
		}
	})
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, ok := plainNotification(line); !ok {
				b.Fatal("not taken")
			}
		}
	})
}

// TestPlainNotificationInvalidUTF8 leaves a line with invalid UTF-8 to jsonrpc2, which replaces
// the bytes (TestHostileInput's case).
func TestPlainNotificationInvalidUTF8(t *testing.T) {
	if _, _, ok := plainNotification([]byte("{\"method\":\"item/completed\",\"params\":{\"text\":\"bad \xff\xfe\"}}")); ok {
		t.Error("taken by the fast path")
	}
}
