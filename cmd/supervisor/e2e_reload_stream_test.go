//go:build linux

package main

import (
	"bufio"
	"net/http"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/local"
)

// A reload asked for while a local caller reads a turn's event stream (which cannot cross: its
// answer has begun) is refused at once, not after --drain-timeout: the turn is still held by
// the model when the refusal comes, and an idle chat's message is answered meanwhile. The
// stream then ends with its reply.
func TestE2EReloadRefusesAtOnceWhatCannotCross(t *testing.T) {
	t.Parallel()
	e, d, g := startReloadableHolding(t, "--drain-timeout", "10m")
	c := newLocalClient(t, d)
	if r := c.send("idle", "warm up"); r.Status != "completed" {
		t.Fatalf("idle chat: %+v", r)
	}
	req, err := http.NewRequest("POST", c.base+"/v1/chats/stream/messages", strings.NewReader(`{"text":"long streamed"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("event stream: HTTP %d", resp.StatusCode)
	}
	d.waitUntil("the streamed turn held by the model", func() bool { return g.holding() == 1 })

	installBin(t, e.bin)
	code, out := e.reloadCmd()
	if code == 0 || !strings.Contains(out, "cannot cross") {
		t.Fatalf("reload exit %d, want a refusal saying what cannot cross:\n%s", code, out)
	}
	if g.holding() != 1 {
		t.Fatalf("the refusal came after the streamed turn ended: it waited")
	}
	if r := c.send("idle", "during the stream"); r.Status != "completed" {
		t.Fatalf("idle chat during the stream: %+v", r)
	}
	if g.holding() != 1 {
		t.Fatalf("the streamed turn ended before the idle chat was answered")
	}
	g.release()
	rd := bufio.NewReader(resp.Body)
	for {
		name, data, err := readSSE(rd)
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		if name == local.EventReply {
			if txt, _ := data["text"].(string); !strings.Contains(txt, "long streamed") {
				t.Fatalf("stream reply %v", data)
			}
			break
		}
		if name == local.EventError {
			t.Fatalf("stream error %v", data)
		}
	}
	if r := d.status().Daemon.LastReload; r.Outcome != reloadRefused || !strings.Contains(r.Error, "cannot cross") {
		t.Fatalf("last reload %+v", r)
	}
	d.stop(stopTimeout)
}
