package appservertest

import (
	"bytes"
	"fmt"
	"os"
	"strings"
)

// loadFakeScript reads a FakeScript file: its lines without their newline; a final newline does
// not start an empty last line.
func loadFakeScript(path string) ([][]byte, error) {
	if path == "" {
		return nil, fmt.Errorf("mode %s needs %s", FakeScript, FakeScriptEnv)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("script: %w", err)
	}
	lines := bytes.Split(data, []byte("\n"))
	if len(lines) > 0 && len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	return lines, nil
}

// scriptEnd says how a played script left its turn.
type scriptEnd int

const (
	scriptEnded       scriptEnd = iota // the script ran out: its own lines ended the turn (or not)
	scriptComplete                     // ScriptComplete: complete the turn normally
	scriptHang                         // ScriptHang: wait for turn/interrupt
	scriptInterrupted                  // interrupted during ScriptAwait
)

// playScript writes the script's lines for turn t and runs its directives. A script that ends the
// turn itself has the fake forget the turn just before its last line is written, as complete
// does before turn/completed: the client may send the next turn/start as soon as it read that
// line, and it must not find this turn still active (it would be merged into it).
func (f *fakeServer) playScript(t *fakeTurn) scriptEnd {
	subst := strings.NewReplacer("{thread}", t.thread.id, "{turn}", t.id, "{turnRequestId}", t.requestID)
	last := -1 // the last line to write, when the script ends the turn itself
	for i, line := range f.script {
		s := string(line)
		if s == ScriptComplete || s == ScriptHang {
			last = -1
			break
		}
		if !strings.HasPrefix(s, "#fake:") {
			last = i
		}
	}
	for i, line := range f.script {
		s := string(line)
		if i == last {
			f.mu.Lock()
			if t.thread.active == t {
				t.thread.active = nil
			}
			f.mu.Unlock()
		}
		switch {
		case strings.HasPrefix(s, ScriptAwait):
			if !f.awaitAnswer(subst.Replace(strings.TrimSpace(strings.TrimPrefix(s, ScriptAwait))), t) {
				return scriptInterrupted
			}
		case s == ScriptComplete:
			return scriptComplete
		case s == ScriptHang:
			return scriptHang
		case strings.HasPrefix(s, ScriptResult):
		default:
			f.writeLine([]byte(subst.Replace(s)))
		}
	}
	return scriptEnded
}
