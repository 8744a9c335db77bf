package appserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sourcegraph/jsonrpc2"
	"go.uber.org/goleak"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/appserver/appservertest"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// The fuzz target's turn: thread "t", turn "u", and turn/start is the client's first request,
// so its id is 0 (jsonrpc2 counts from 0; a PipeChild skips the handshake).
const (
	fuzzThread    = "t"
	fuzzTurn      = "u"
	fuzzTurnStart = `{"id":0,"result":{"turn":{"id":"u","status":"inProgress","items":[]}}}`
)

// FuzzLineStream feeds arbitrary bytes, as the child's stdout, to a client with a turn in flight:
// through the line reader, jsonrpc2, the inbound queue, the dispatcher, the policy and the
// projector, without a process (appserver.PipeChild). After the bytes, the child exits.
//
// It asserts what the hostile table asserts case by case, for any input: nothing panics (a
// panic in any of the client's goroutines kills the fuzz worker and is reported as a crasher);
// RunTurn returns; its error, if any, is one a caller can act on; a result without error has a
// status and a valid UTF-8 reply; all the client's goroutines end and the stdin is closed.
//
// cancel additionally cancels the turn after the bytes were written (the interrupt path);
// maxLine, when not 0, is Config.MaxLineBytes (the line limit path).
func FuzzLineStream(f *testing.F) {
	for _, seed := range fuzzSeeds(f) {
		f.Add(seed, false, uint16(0))
	}
	f.Add([]byte(fuzzTurnStart+"\n"+strings.Repeat("x", 300)+"\n"), false, uint16(100))
	f.Add([]byte(fuzzTurnStart+"\n"+itemDone(fuzzThread, fuzzTurn, "m", "hi")+"\n"), true, uint16(0))

	f.Fuzz(func(t *testing.T, data []byte, cancel bool, maxLine uint16) {
		res, err := playPipeChild(t, data, cancel, int(maxLine))
		checkFuzzOutcome(t, res, err)
	})
}

// playPipeChild runs one turn on a PipeChild whose stdout is data, then lets the child exit, and
// returns what RunTurn returned. It fails the test when RunTurn does not return, or when the
// client leaves a goroutine behind.
func playPipeChild(t *testing.T, data []byte, cancel bool, maxLine int) (*appserver.TurnResult, error) {
	t.Helper()
	leaks := goleak.IgnoreCurrent()
	p, err := appserver.NewPipeChild(appserver.Config{
		MaxLineBytes: maxLine,
		// How long the client, once the child exited, lets the reader take what is still in the
		// pipe. Exit closes the pipe, so the reader gets there as fast as it can read: a short
		// grace would only cut off the turn's last lines on a loaded machine.
		CloseGrace:   promptly,
		WriteTimeout: promptly,
		Policy:       appserver.AcceptPolicy(), // the policy that can say the most
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	type outcome struct {
		res *appserver.TurnResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := p.C.RunTurn(ctx, fuzzThread, text("hi"), appserver.TurnOptions{InterruptGrace: 50 * time.Millisecond})
		done <- outcome{res, err}
	}()
	// The bytes are meant as the answer to a turn/start that was sent.
	select {
	case <-p.TurnStartSent:
	case <-time.After(promptly):
		t.Fatal("RunTurn did not send turn/start")
	}
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		_, _ = p.Write(data) // fails with EPIPE once the client gave up on the stream
	}()
	select {
	case <-wrote:
	case <-time.After(promptly):
		t.Fatal("the client stopped reading the child's stdout without closing it")
	}
	if cancel {
		stop()
	}
	p.Exit()

	var o outcome
	select {
	case o = <-done:
	case <-time.After(promptly):
		t.Fatal("RunTurn did not return after the child exited")
	}
	if err := p.Wait(promptly); err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t, leaks)
	return o.res, o.err
}

// TestPipeChildPlaysRecordedTurns checks the fuzz target's harness on the recorded codex
// sessions: a PipeChild that plays a whole turn yields that turn, as a real child would. Without
// this the fuzz target could be exercising nothing but the failure path.
func TestPipeChildPlaysRecordedTurns(t *testing.T) {
	// reply is a piece of the expected reply; "" for the turns that end without an answer.
	for name, want := range map[string]struct{ status, reply string }{
		"approval-declined":       {protocol.TurnCompleted, "rejected by user"},
		"model-error-failed-turn": {protocol.TurnFailed, ""},
		"two-turns":               {protocol.TurnCompleted, "echo: hello there"},
		"wedged-turn-interrupted": {protocol.TurnInterrupted, ""},
	} {
		t.Run(name, func(t *testing.T) {
			noLeaks(t)
			res, err := playPipeChild(t, recordedTurn(t, "../testdata/codex-wire/"+name+".jsonl"), false, 0)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != want.status || res.TurnID != fuzzTurn ||
				!strings.Contains(replyOf(res), want.reply) || want.reply == "" && replyOf(res) != "" {
				t.Errorf("turn %q status %q reply %q, want %s with %q", res.TurnID, res.Status, replyOf(res), want.status, want.reply)
			}
		})
	}
}

// checkFuzzOutcome asserts that RunTurn's outcome is one a caller can act on.
func checkFuzzOutcome(t *testing.T, res *appserver.TurnResult, err error) {
	t.Helper()
	if err == nil {
		if res == nil || res.Status == "" {
			t.Fatalf("no error, but result %+v has no status", res)
		}
	} else {
		var rpcErr *jsonrpc2.Error
		var authErr *appserver.AuthError
		known := errors.Is(err, appserver.ErrChildExited) || errors.Is(err, appserver.ErrProtocol) ||
			errors.Is(err, appserver.ErrWedged) || errors.Is(err, appserver.ErrThreadNotFound) ||
			errors.Is(err, context.Canceled) || errors.As(err, &rpcErr) || errors.As(err, &authErr)
		if !known {
			t.Fatalf("RunTurn error %v (%T) wraps none of the errors a caller can act on", err, err)
		}
	}
	if res != nil && !utf8.ValidString(replyOf(res)) {
		t.Fatalf("reply %q is not valid UTF-8", replyOf(res))
	}
}

// fuzzSeeds returns the fuzz target's seed inputs: the recorded codex sessions (turn id, thread
// id and turn/start id rewritten to the fuzz target's), and every hostile case's script.
func fuzzSeeds(f testing.TB) [][]byte {
	f.Helper()
	var seeds [][]byte
	files, err := filepath.Glob("../testdata/codex-wire/*.jsonl")
	if err != nil || len(files) == 0 {
		f.Fatalf("no recorded sessions (%v)", err)
	}
	for _, file := range files {
		seeds = append(seeds, recordedTurn(f, file))
	}
	ids := strings.NewReplacer("{thread}", fuzzThread, "{turn}", fuzzTurn, "{turnRequestId}", "0")
	for _, tc := range hostileCases {
		var b strings.Builder
		turnStart := fuzzTurnStart
		for _, line := range tc.script {
			if raw, ok := strings.CutPrefix(line, appservertest.ScriptResult+"turn/start "); ok {
				turnStart = `{"id":0,"result":` + ids.Replace(raw) + `}`
			}
		}
		b.WriteString(turnStart + "\n")
		for _, line := range tc.script {
			switch {
			case len(line) > 64<<10: // the 10 MiB and 100,000-level lines: the table has them
			case line == appservertest.ScriptComplete:
				b.WriteString(itemDone(fuzzThread, fuzzTurn, "m", "reply") + "\n" + turnDone(fuzzThread, fuzzTurn, "completed") + "\n")
			case strings.HasPrefix(line, "#fake:"):
			default:
				b.WriteString(ids.Replace(line) + "\n")
			}
		}
		seeds = append(seeds, []byte(b.String()))
	}
	return seeds
}

// recordedTurn returns what codex sent after the first turn/start of a recorded session, with
// its ids rewritten to the fuzz target's.
func recordedTurn(f testing.TB, file string) []byte {
	f.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		f.Fatal(err)
	}
	type message struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			ThreadID string `json:"threadId"`
		} `json:"params"`
		Result struct {
			Turn struct {
				ID string `json:"id"`
			} `json:"turn"`
		} `json:"result"`
	}
	var turnStartID, thread, turn string
	var recv []string // what codex sent after turn/start, compacted
	for line := range bytes.Lines(data) {
		var w struct {
			Dir string          `json:"dir"`
			Msg json.RawMessage `json:"msg"`
		}
		var m message
		var compact bytes.Buffer
		if json.Unmarshal(line, &w) != nil || json.Unmarshal(w.Msg, &m) != nil || json.Compact(&compact, w.Msg) != nil {
			f.Fatalf("%s: bad line %q", file, line)
		}
		switch {
		case turnStartID == "" && w.Dir == "send" && m.Method == protocol.MethodTurnStart:
			turnStartID, thread = string(m.ID), m.Params.ThreadID
		case turnStartID != "" && w.Dir == "recv":
			if turn == "" && m.Method == "" && string(m.ID) == turnStartID {
				turn = m.Result.Turn.ID
			}
			recv = append(recv, compact.String())
		}
	}
	if turn == "" {
		f.Fatalf("%s: no turn/start response", file)
	}
	ids := strings.NewReplacer(`{"id":`+turnStartID+`,"result":{"turn":{"id":"`+turn+`"`, `{"id":0,"result":{"turn":{"id":"`+fuzzTurn+`"`,
		thread, fuzzThread, turn, fuzzTurn)
	var out strings.Builder
	for _, msg := range recv {
		out.WriteString(ids.Replace(msg) + "\n")
	}
	return []byte(out.String())
}
