//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/local"
)

// reloadMark is a moment of a reload a test sends signals at: a log line the daemon writes (its
// n-th occurrence), or the exec itself (the daemon's /proc/<pid>/exe turns into the new file).
type reloadMark struct {
	name string
	// msg is the log line marking the moment; empty for the exec.
	msg string
	// fatalWindow: a SIGTERM sent at this mark may land between the old image's last
	// handler and the new image's first (docs/HANDOFF.md), where its default action ends the
	// daemon.
	fatalWindow bool
}

// The moments of a reload, in order: the old image's preflight, its quiescing, its last line
// before execve, the exec (the new image's first instructions, before its handlers), and the
// new image's takeover.
var reloadMarks = []reloadMark{
	{"preflight", "reload: checking the new binary", false},
	{"quiescing", "reload: new binary answers; quiescing", false},
	{"handing over", "reload: handing over and re-executing", true},
	{"exec", "", true},
	{"signals caught", "reload: signals caught in the new image", false},
	{"took over", "reload: took over from the previous image", false},
}

// spinUntil returns as soon as cond holds, checking it back to back: the signal the caller
// sends next must land as close to the event as a reader of /proc and of the log can see it.
// It fails the test at the wait deadline or when the daemon exits.
func (d *daemonProc) spinUntil(what string, cond func() bool) {
	t := d.e.t
	t.Helper()
	ctx, cancel := d.waitCtx()
	defer cancel()
	for !cond() {
		if ctx.Err() != nil || d.hasExited() {
			t.Fatalf("waiting for %s: %v (daemon exited: %v)\ndaemon log:\n%s", what, ctx.Err(), d.hasExited(), d.logTail(4000))
		}
		runtime.Gosched()
	}
}

// killedBy reports whether a daemon's exit error is death by sig.
func killedBy(err error, sig syscall.Signal) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

// logCount counts the daemon's log lines containing msg, read from the file directly: cheap
// enough to spin on.
func (d *daemonProc) logCount(msg string) int {
	b, err := os.ReadFile(d.logPath)
	if err != nil {
		return 0
	}
	return strings.Count(string(b), `"msg":"`+msg)
}

// waitMark waits for m of the reload that runs the file with inode ino, the n-th one of the
// daemon's log lines m.msg.
func (d *daemonProc) waitMark(m reloadMark, ino uint64, n int) {
	d.e.t.Helper()
	if m.msg == "" {
		exe := fmt.Sprintf("/proc/%d/exe", d.pid)
		d.spinUntil("the exec", func() bool {
			var st syscall.Stat_t
			return syscall.Stat(exe, &st) == nil && st.Ino == ino
		})
		return
	}
	d.spinUntil(m.name, func() bool { return d.logCount(m.msg) >= n })
}

// waitOrExit waits until cond holds or the daemon exits, whichever comes first.
func (d *daemonProc) waitOrExit(what string, cond func() bool) {
	t := d.e.t
	t.Helper()
	ctx, cancel := d.waitCtx()
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !d.hasExited() && !cond() {
		select {
		case <-d.exited:
		case <-ctx.Done():
			if !d.hasExited() {
				t.Fatalf("waiting for %s: %v\ndaemon log:\n%s", what, ctx.Err(), d.logTail(4000))
			}
		case <-tick.C:
		}
	}
}

// SIGHUPs sent in a burst, or a second one, at every moment of a reload (before it quiesces,
// while it does, just before the exec, in the new image's first instructions, once it caught
// its signals and right after it took over) neither kill the daemon nor leave it stuck: each is
// refused (a reload runs), coalesced (ignored across the exec) or starts the next reload. The
// daemon keeps its pid, the chat its warm child, it answers, and it then stops cleanly.
func TestE2EReloadSignalHUPBursts(t *testing.T) {
	t.Parallel()
	for _, burst := range []int{1, 10} {
		for _, m := range reloadMarks {
			t.Run(fmt.Sprintf("%d_at_%s", burst, strings.ReplaceAll(m.name, " ", "_")), func(t *testing.T) {
				e := newE2E(t, e2eConfig{Local: true})
				installReloadable(t, e)
				d := e.start()
				c := newLocalClient(t, d)
				if r := c.send("warm", "first message"); r.Status != "completed" {
					t.Fatalf("first reply: %+v", r)
				}
				key := chatChildren(d.status())[0].ChatKey
				child := procOf(t, childPID(d.status(), key))
				ino := installBin(t, e.bin)
				d.signal(syscall.SIGHUP)
				d.waitMark(m, ino, 1)
				for range burst {
					if err := syscall.Kill(d.pid, syscall.SIGHUP); err != nil {
						t.Fatal(err)
					}
				}
				d.waitUntil("the reload to take over", func() bool {
					return d.logCount("reload: took over from the previous image") >= 1
				})
				// A SIGHUP the new image caught starts one more reload: wait for its end too.
				d.waitUntil("no reload running", func() bool {
					doc, err := fetchStatusQuick(d)
					return err == nil && doc.Daemon.LastReload != nil && doc.Daemon.LastReload.Outcome == reloadOK
				})
				doc := d.status()
				if doc.Daemon.PID != d.pid {
					t.Fatalf("pid %d, want %d", doc.Daemon.PID, d.pid)
				}
				if procOf(t, childPID(doc, key)) != child {
					t.Fatalf("the chat's child changed")
				}
				// On a new connection: a SIGHUP the new image caught may start one more reload
				// right after the status above, and an idle keep-alive connection is closed at its
				// exec (a POST racing that close gets EOF, as from any HTTP server); a new
				// connection waits in the listener's backlog and is served by the next image.
				fresh := newLocalClient(t, d)
				fresh.hc.Transport.(*http.Transport).DisableKeepAlives = true
				if r := fresh.send("warm", "after the burst"); r.Status != "completed" || !strings.Contains(r.Text, "after the burst") {
					t.Fatalf("reply %+v", r)
				}
				t.Logf("reloads done: %d", d.logCount("reload: took over from the previous image"))
				d.stop(stopTimeout)
			})
		}
	}
}

// SIGTERM at every moment of a reload while a caller waits for a turn the model holds: the
// daemon drains and exits 0 (the stop is neither lost nor fatal), and the caller gets the
// reply of the turn the model ran, never a 503. The one exception is the new image's first
// instructions, before its runtime reaches the first handler (mark "exec", docs/HANDOFF.md):
// there a SIGTERM ends the daemon by its default action (it is never lost), which the test
// accepts only there.
func TestE2EReloadSignalTermDuringReload(t *testing.T) {
	t.Parallel()
	for _, m := range reloadMarks {
		t.Run(strings.ReplaceAll(m.name, " ", "_"), func(t *testing.T) {
			e, d, g := startReloadableHolding(t, "--drain-timeout", "60s")
			c := newLocalClient(t, d)
			if r := c.send("busy", "warm up"); r.Status != "completed" {
				t.Fatalf("warm up: %+v", r)
			}
			waiting := postAsync(c, "busy", "long turn")
			d.waitUntil("the turn held by the model", func() bool { return g.holding() == 1 })
			ino := installBin(t, e.bin)
			d.signal(syscall.SIGHUP)
			d.waitMark(m, ino, 1)
			d.signal(syscall.SIGTERM)
			// The drain waits for the turn: the model answers once the stop was taken.
			d.waitOrExit("the stop to be taken", func() bool { return d.logCount("signal received") > 0 })
			g.release()
			var r local.Reply
			select {
			case r = <-waiting:
			case <-time.After(stopTimeout):
				t.Fatalf("no reply %s after the stop\n%s", stopTimeout, d.logTail(4000))
			}
			if m.fatalWindow && d.hasExited() && d.logCount("signal received") == 0 {
				if !killedBy(d.waitErr, syscall.SIGTERM) {
					t.Fatalf("the daemon ended by %v, want SIGTERM's default action or a drain", d.waitErr)
				}
				t.Logf("SIGTERM in the new image's first instructions: ended by the default action (caller: %s)", r.Status)
				return
			}
			d.waitExit(stopTimeout)
			if r.Status != "completed" || !strings.Contains(r.Text, "long turn") {
				t.Fatalf("the waiting caller got %+v, want the turn's reply", r)
			}
		})
	}
}

// fetchStatusQuick asks the daemon's control socket for its status once.
// waitReloadServed waits until the image a reload started serves (its reload's outcome is no
// longer "starting") and returns that status.
func waitReloadServed(d *daemonProc) StatusDoc {
	var doc StatusDoc
	d.waitUntil("the new image to serve", func() bool {
		var err error
		doc, err = fetchStatusQuick(d)
		return err == nil && doc.Daemon.LastReload != nil && doc.Daemon.LastReload.Outcome != reloadStarting
	})
	return doc
}

func fetchStatusQuick(d *daemonProc) (StatusDoc, error) {
	ctx, cancel := d.waitCtx()
	defer cancel()
	return fetchStatus(ctx, d.e.stateDir)
}

// postAsync posts text to chatKey in its own goroutine; a connection the daemon's end cut
// yields Status "cut".
func postAsync(c *localClient, chatKey, text string) <-chan local.Reply {
	out := make(chan local.Reply, 1)
	go func() {
		body, _ := json.Marshal(local.Message{Text: text})
		resp, err := c.hc.Post(c.base+"/v1/chats/"+chatKey+"/messages", "application/json", strings.NewReader(string(body)))
		if err != nil {
			out <- local.Reply{Status: "cut", Text: err.Error()}
			return
		}
		defer resp.Body.Close()
		var r local.Reply
		if b, err := io.ReadAll(resp.Body); err != nil || resp.StatusCode != 200 || json.Unmarshal(b, &r) != nil {
			r = local.Reply{Status: "HTTP error", Text: fmt.Sprintf("%d %s %v", resp.StatusCode, b, err)}
		}
		out <- r
	}()
	return out
}

// `supervisor stop` (POST /v1/stop, what the unit's ExecStop= runs) at every moment of a
// reload, the two next to the exec included, while a caller waits for a turn the model holds:
// unlike SIGTERM it has no window. The request is taken by the old image (the reload is called
// off) or waits in the control socket's backlog for the new one; the daemon drains, the caller
// gets its reply, the command returns once the daemon exited 0.
func TestE2EReloadStopCommandDuringReload(t *testing.T) {
	t.Parallel()
	for _, m := range reloadMarks {
		t.Run(strings.ReplaceAll(m.name, " ", "_"), func(t *testing.T) {
			e, d, g := startReloadableHolding(t, "--drain-timeout", "60s")
			c := newLocalClient(t, d)
			if r := c.send("busy", "warm up"); r.Status != "completed" {
				t.Fatalf("warm up: %+v", r)
			}
			waiting := postAsync(c, "busy", "long turn")
			d.waitUntil("the turn held by the model", func() bool { return g.holding() == 1 })
			ino := installBin(t, e.bin)
			d.signal(syscall.SIGHUP)
			d.waitMark(m, ino, 1)
			type result struct {
				code int
				out  string
			}
			stopped := make(chan result, 1)
			go func() {
				var out bytes.Buffer
				code := runMain(context.Background(), []string{"stop", "--state-dir", e.stateDir}, noEnv, &out, &out)
				stopped <- result{code, out.String()}
			}()
			d.waitUntil("the stop to be taken", func() bool { return d.logCount("signal received") > 0 })
			g.release()
			var r local.Reply
			select {
			case r = <-waiting:
			case <-time.After(stopTimeout):
				t.Fatalf("no reply %s after the stop\n%s", stopTimeout, d.logTail(4000))
			}
			if r.Status != "completed" || !strings.Contains(r.Text, "long turn") {
				t.Fatalf("the waiting caller got %+v, want the turn's reply", r)
			}
			select {
			case res := <-stopped:
				if res.code != 0 || !strings.Contains(res.out, "stopped: pid") {
					t.Fatalf("supervisor stop: exit %d:\n%s", res.code, res.out)
				}
			case <-time.After(stopTimeout):
				t.Fatalf("supervisor stop did not return %s after the reply", stopTimeout)
			}
			d.waitExit(stopTimeout)
		})
	}
}
