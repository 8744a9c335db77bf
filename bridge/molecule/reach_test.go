package molecule

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

// Polls and heartbeats are routine: each is a debug line. An outage is not: the platform
// becoming unreachable is one info line and its coming back another, however many polls and
// heartbeats failed in between; the counters still count every failure.
func TestPlatformOutageLoggedOnceEachWay(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	log, logs := newTestLogger(t)
	cfg := testConfig(p, t.TempDir(), chattest.NewAnswerer(nil), log)
	cfg.HeartbeatInterval = 5 * time.Millisecond
	p.FailNext(moleculetest.RouteActivity, 6, http.StatusBadGateway)
	p.FailNext(moleculetest.RouteHeartbeat, 3, http.StatusServiceUnavailable)
	r := start(t, cfg)

	// Waits on the log lines themselves: a call the platform recorded may not be logged yet.
	debugLines := func(msg string) int { return logs.FilterLevelExact(zapcore.DebugLevel).FilterMessage(msg).Len() }
	must(t, p.WaitFor(waitCtx(t), func() bool {
		return debugLines("polled") >= 3 && debugLines("heartbeat sent") >= 2 &&
			logs.FilterMessageSnippet("platform reachable again").Len() > 0
	}))
	must(t, r.stop())

	if n := logs.FilterMessageSnippet("platform unreachable").Len(); n != 1 {
		t.Errorf("%d 'platform unreachable' lines, want 1:\n%s", n, dumpLogs(logs))
	}
	if n := logs.FilterMessageSnippet("platform reachable again").Len(); n != 1 {
		t.Errorf("%d 'platform reachable again' lines, want 1:\n%s", n, dumpLogs(logs))
	}
	for _, e := range logs.FilterLevelExact(zapcore.InfoLevel).All() {
		if strings.HasPrefix(e.Message, "platform unreachable") || strings.HasPrefix(e.Message, "platform reachable again") {
			continue
		}
		if strings.HasPrefix(e.Message, "poll") || strings.HasPrefix(e.Message, "heartbeat") {
			t.Errorf("routine line above debug: %s", entryText(e))
		}
	}
	for _, lvl := range []zapcore.Level{zapcore.WarnLevel, zapcore.ErrorLevel} {
		for _, e := range logs.FilterLevelExact(lvl).All() {
			t.Errorf("%s line during a platform outage: %s", lvl, entryText(e))
		}
	}
	if n := logs.FilterLevelExact(zapcore.DebugLevel).FilterMessageSnippet("poll failed").Len(); n != 6 {
		t.Errorf("%d debug 'poll failed' lines, want one per failed poll (6)", n)
	}
	if n := logs.FilterLevelExact(zapcore.DebugLevel).FilterMessageSnippet("heartbeat failed").Len(); n != 3 {
		t.Errorf("%d debug 'heartbeat failed' lines, want one per failed heartbeat (3)", n)
	}
	if s := r.m.Stats(); s.PollErrors != 6 || s.HeartbeatErrors != 3 {
		t.Errorf("poll errors %d, heartbeat errors %d; want 6 and 3 counted", s.PollErrors, s.HeartbeatErrors)
	}
}

// dumpLogs is every recorded line, for a failure message.
func dumpLogs(logs *observer.ObservedLogs) string {
	var b strings.Builder
	for _, e := range logs.All() {
		b.WriteString(e.Level.String() + " " + entryText(e) + "\n")
	}
	return b.String()
}

// A state file that cannot be written is an error line when writes start failing and an info
// line when one succeeds again, not a line per poll for as long as the disk is full; every
// failed write is still counted.
func TestStateWriteFailureLoggedOncePerChange(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	log, logs := newTestLogger(t)
	dir := t.TempDir()
	r := start(t, testConfig(p, dir, chattest.NewAnswerer(nil), log))
	path := filepath.Join(dir, StateFileName)
	must(t, os.RemoveAll(path))
	// A directory where the file goes: tests run as root, so permissions would not stop a write.
	must(t, os.MkdirAll(filepath.Join(path, "blocker"), 0o700))

	first := p.Enqueue(moleculetest.CanvasMessage("while the disk is full"))[0]
	// Every poll tries the failed write again: wait for several of them.
	must(t, p.WaitFor(waitCtx(t), statsCond(r.m, func(s Stats) bool {
		return s.Delivered == 1 && s.Cursor == first && s.PersistErrors >= 5
	})))
	must(t, os.RemoveAll(path))
	second := p.Enqueue(moleculetest.CanvasMessage("after space came back"))[0]
	recovered := func() bool { return logs.FilterMessageSnippet("state file written again").Len() > 0 }
	must(t, p.WaitFor(waitCtx(t), func() bool {
		s := r.m.Stats()
		return s.Delivered == 2 && s.Cursor == second && recovered()
	}))
	must(t, r.stop())

	if n := logs.FilterLevelExact(zapcore.ErrorLevel).Len(); n != 1 {
		t.Errorf("%d error lines for one stretch of failed state writes, want 1:\n%s", n, dumpLogs(logs))
	}
	if n := logs.FilterLevelExact(zapcore.InfoLevel).FilterMessageSnippet("state file written again").Len(); n != 1 {
		t.Errorf("%d info lines for the recovery, want 1:\n%s", n, dumpLogs(logs))
	}
	if s := r.m.Stats(); s.PersistErrors < 5 {
		t.Errorf("persist errors %d: every failed write must still be counted", s.PersistErrors)
	}
}
