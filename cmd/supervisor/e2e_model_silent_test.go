//go:build linux

package main

// A model service that accepts the request and never answers (a black hole): codex waits on it
// for good (measured on 0.169: no notification at all over HTTP; over the websocket a fallback
// warning after stream_idle_timeout, then the same silence over HTTP). The daemon ends the turn
// after --model-silent-timeout like an unreachable model, and never cuts a model that answers.

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

func TestE2EModelBlackHole(t *testing.T) {
	t.Parallel()
	never := make(chan struct{})
	t.Cleanup(func() { close(never) })
	e := newE2E(t, e2eConfig{Local: true, Script: func(req mockmodel.Request) mockmodel.Reply {
		if strings.Contains(req.LastUserText, "black hole") {
			return mockmodel.Reply{Hold: never}
		}
		if strings.Contains(req.LastUserText, "slow to finish") {
			// The answer starts at once and ends after more than the bound: only the wait for
			// the model's first output counts against it. (How long codex takes to send the
			// request is the machine's, so the start is not delayed here.)
			return mockmodel.Reply{Text: "done slowly", FinishLatency: 4 * time.Second}
		}
		return mockmodel.DefaultScript(req)
	}})
	d := e.start("--turn-timeout", "10m", "--model-silent-timeout", "3s", "--spares", "0")
	c := newLocalClient(t, d)
	// A working model that has started answering is not cut by the bound, however long it takes.
	if r := c.send("a", "slow to finish"); r.Status != "completed" {
		t.Fatalf("slow model: %+v", r)
	}
	code, body, hdr := c.post("a", `{"text": "into the black hole"}`)
	if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" ||
		!strings.Contains(string(body), "accepted the request and sent nothing for 3s") {
		t.Fatalf("black hole: HTTP %d (Retry-After %q) %s", code, hdr.Get("Retry-After"), body)
	}
	if m := d.status().Snapshot.Model; !m.Unreachable || !strings.Contains(m.Cause, "sent nothing") {
		t.Errorf("status model %+v, want unreachable with the cause", m)
	}
	if code, reason := getReady(t, d); code == http.StatusOK || !strings.Contains(reason, "sent nothing") {
		t.Errorf("readyz %d %q, want not ready", code, reason)
	}
	// The service answers again: the next message works and readiness recovers.
	if r := c.send("b", "hello again"); r.Status != "completed" {
		t.Fatalf("after the black hole: %+v", r)
	}
	if code, _ := getReady(t, d); code != http.StatusOK {
		t.Errorf("readyz %d after a completed turn", code)
	}
	d.stop(stopTimeout)
}
