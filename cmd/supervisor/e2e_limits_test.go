//go:build linux

package main

// The account's usage limit: real codex meets the mock's 429 usage_limit_reached; the daemon
// parks work until the reset (Molecule), or answers 429 with Retry-After (local inbox), and
// counts every turn's tokens.

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/local"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/metrics/metricstest"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// limitSwitch is a mock model script that answers every request with a usage limit resetting
// resetIn from the request while on, and by mockmodel.DefaultScript (with fixed token counts
// and rate-limit headers) while off.
type limitSwitch struct {
	resetIn time.Duration
	mu      sync.Mutex
	on      bool
	hits    int
}

// Token counts every answer reports while the limit is off.
var limitUsage = mockmodel.Usage{Input: 10, CachedInput: 4, Output: 3, Reasoning: 2}

func (l *limitSwitch) set(on bool) {
	l.mu.Lock()
	l.on = on
	l.mu.Unlock()
}

func (l *limitSwitch) script(req mockmodel.Request) mockmodel.Reply {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if l.on {
		l.hits++
		return mockmodel.Reply{UsageLimit: &mockmodel.UsageLimit{ResetsAt: now.Add(l.resetIn)}}
	}
	r := mockmodel.DefaultScript(req)
	u := limitUsage
	r.Usage = &u
	r.RateLimits = &mockmodel.RateLimits{Primary: &mockmodel.RateWindow{UsedPercent: 12, WindowMinutes: 300, ResetsAt: now.Add(5 * time.Hour)},
		Secondary: &mockmodel.RateWindow{UsedPercent: 3, WindowMinutes: 10080, ResetsAt: now.Add(100 * time.Hour)}}
	return r
}

func (l *limitSwitch) limitHits() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.hits
}

// replyTexts are the delivered replies (notifies and A2A sends) in delivery order.
func (e *e2e) replyTexts() []string {
	var out []string
	for _, c := range e.plat.Calls() {
		if text, _, ok := c.Reply(); ok && c.Status == http.StatusOK {
			out = append(out, text)
		}
	}
	return out
}

const parkedNotice = "usage limit reached; your message will be answered after "

// Messages on three chats meet the account's usage limit: each chat is told once when its
// message will be answered, the rows stay unacknowledged, status shows the limit; a SIGKILL
// and a restart while parked lose nothing and tell nobody again; after the reset the messages
// run oldest first, each is answered exactly once, and each thread holds its message once.
func TestE2EUsageLimitParksMoleculeAcrossRestart(t *testing.T) {
	t.Parallel()
	// queue: the inbox submits and waits; steer hands the message over to the supervisor's queue
	// (the handOff path), which must park it the same way.
	for _, busy := range []string{"queue", "steer"} {
		t.Run(busy, func(t *testing.T) {
			t.Parallel()
			usageLimitParksMolecule(t, busy)
		})
	}
}

func usageLimitParksMolecule(t *testing.T, busy string) {
	lim := &limitSwitch{resetIn: 3 * time.Second, on: true}
	e := newE2E(t, e2eConfig{Script: lim.script, Platform: moleculetest.Config{AckEnabled: true}})
	flags := []string{"--resume-spacing", "200ms", "--busy", busy}
	d := e.start(flags...)
	ids := e.plat.Enqueue(moleculetest.CanvasMessage("canvas-one").WithSeq(1),
		moleculetest.PeerMessage("peer-a", "peer-a-one").WithSeq(2),
		moleculetest.PeerMessage("peer-b", "peer-b-one").WithSeq(3))
	d.waitPlatform("three usage-limit notices", func() bool { return countContaining(e.replyTexts(), parkedNotice) == 3 })
	if got := e.replyTexts(); len(got) != 3 {
		t.Fatalf("replies while parked: %q, want only the three notices", got)
	}
	lt := d.status().Snapshot.Limits
	if !lt.Limited || lt.Hits < 1 || lt.ResetsAt.IsZero() {
		t.Errorf("status limits while parked: %+v", lt)
	}
	if _, out := runStatus(t, "--state-dir", e.stateDir); !strings.Contains(out, "WARNING: the account's usage limit is reached") {
		t.Errorf("status table lacks the usage-limit warning:\n%s", out)
	}
	for i, id := range ids {
		if st := e.bridgeState(); st.Cursor == id || slices.Contains(st.Done, id) || slices.Contains(e.plat.Acks(), int64(i+1)) {
			t.Errorf("row %s was passed while parked: %+v", id, st)
		}
	}

	d.kill()
	d2 := e.start(flags...)
	d2.waitUntil("the three messages parked again", func() bool { return d2.bridgeStats().Parked == 3 })
	lim.set(false)
	want := []string{"reply #1: canvas-one", "reply #1: peer-a-one", "reply #1: peer-b-one"}
	d2.waitPlatform("the three answers", func() bool {
		return countContaining(e.replyTexts(), "reply #") == 3
	})
	d2.waitPlatform("the mailbox acks", func() bool { return len(e.plat.Acks()) > 0 && slices.Max(e.plat.Acks()) == 3 })
	d2.waitPolls(3)

	var answers []string
	for _, r := range e.replyTexts() {
		if strings.Contains(r, "reply #") {
			answers = append(answers, r)
		}
	}
	// Each chat's turn runs on its own child: they start oldest first (below) and may finish in
	// any order.
	slices.Sort(answers)
	if !slices.Equal(answers, want) {
		t.Errorf("answers %q, want %q: each once", answers, want)
	}
	if n := countContaining(e.replyTexts(), parkedNotice); n != 3 {
		t.Errorf("%d usage-limit notices in all, want one per message across the restart", n)
	}
	// Each thread holds its message once: the turns that met the limit were taken out again.
	for _, r := range e.mock.Requests() {
		if r.LastUserText != "" && !slices.Equal(r.UserTexts, []string{r.LastUserText}) {
			t.Errorf("request for %q carried user texts %q: a parked message stayed in its thread", r.LastUserText, r.UserTexts)
		}
	}
	// The daemon let the parked messages go oldest first: the last release of each chat, in
	// order. (Their turns then run in parallel, each on its chat's child.)
	var released []string
	for _, l := range d2.logsWith("a parked message goes ahead") {
		key := l.str("chat_key")
		released = slices.DeleteFunc(released, func(k string) bool { return k == key })
		released = append(released, key)
	}
	if want := []string{e.canvasKey(), "peer:peer-a", "peer:peer-b"}; !slices.Equal(released, want) {
		t.Errorf("parked messages went ahead in the order %q, want %q", released, want)
	}
	for _, r := range e.mock.Requests() {
		if !r.Websocket {
			t.Errorf("request %d came over HTTP: the limit is tested on the websocket production uses", r.N)
			break
		}
	}
	if lim.limitHits() < 3 {
		t.Errorf("the mock answered %d usage limits, want at least one per message", lim.limitHits())
	}
	for _, key := range []string{e.canvasKey(), "peer:peer-a", "peer:peer-b"} {
		if u := d2.status().Snapshot.Usage[key]; u.InputTokens != limitUsage.Input || u.CachedInputTokens != limitUsage.CachedInput ||
			u.OutputTokens != limitUsage.Output || u.ReasoningOutputTokens != limitUsage.Reasoning || u.Turns != 1 {
			t.Errorf("%s's token totals %+v, want the one answered turn's", key, u)
		}
	}
	if lt := d2.status().Snapshot.Limits; lt.Limited || lt.Parked != 0 || lt.Primary == nil || lt.Primary.UsedPercent != 12 {
		t.Errorf("status limits after the reset: %+v", lt)
	}
	if l := d.logsWith("the account's usage limit is reached: work is parked until the reset"); len(l) != 1 || l[0].str("level") != "warn" {
		t.Errorf("%d warnings of the limit in the first daemon's log, want one", len(l))
	}
	d2.stop(stopTimeout)
}

// countContaining counts the texts that contain sub.
func countContaining(texts []string, sub string) int {
	n := 0
	for _, s := range texts {
		if strings.Contains(s, sub) {
			n++
		}
	}
	return n
}

// The local inbox parks nothing: a message that meets the limit is answered 429 with
// Retry-After at the reset, and so is every chat's message until then, without a turn. After
// the reset the same chat is answered, with its thread holding the message once. Token totals
// per chat match what the mock reported, in status, /status and metrics; a restart keeps them.
func TestE2EUsageLimitLocalAndTokenTotals(t *testing.T) {
	t.Parallel()
	lim := &limitSwitch{resetIn: time.Hour, on: true}
	e := newE2E(t, e2eConfig{Local: true, Script: lim.script})
	d := e.start("--metrics-listen", "127.0.0.1:0")
	c := newLocalClient(t, d)

	for i, chat := range []string{"alpha", "beta", "gamma"} {
		body, _ := json.Marshal(local.Message{Text: "hello " + chat})
		code, b, hdr := c.post(chat, string(body))
		var er local.ErrorReply
		_ = json.Unmarshal(b, &er)
		if code != http.StatusTooManyRequests || !strings.Contains(er.Error, "usage limit reached") || er.ResetsAt.IsZero() {
			t.Fatalf("%s: HTTP %d %s, want 429 with the limit", chat, code, b)
		}
		if ra := hdr.Get("Retry-After"); ra == "" || ra == "1" {
			t.Errorf("%s: Retry-After %q, want about an hour", chat, ra)
		}
		if i == 0 && lim.limitHits() != 1 {
			t.Errorf("the first message made %d model requests", lim.limitHits())
		}
	}
	if n := lim.limitHits(); n != 1 {
		t.Errorf("%d model requests met the limit, want 1: later messages wait without a turn", n)
	}

	lim.set(false)
	// The reset is an hour away: a restart with the limit recorded would still refuse, so the
	// test clears it the way an operator's wait would, by letting a completed turn end it. Here
	// the daemon restarts after the limit file is removed, which also proves the usage file
	// is what keeps the totals.
	d.stop(stopTimeout)
	removeLimitsFile(t, e)
	d = e.start("--metrics-listen", "127.0.0.1:0")
	c = newLocalClient(t, d)
	for _, m := range []struct{ chat, text string }{{"alpha", "hello alpha"}, {"alpha", "again"}, {"beta", "hello beta"}} {
		if r := c.send(m.chat, m.text); r.Status != "completed" {
			t.Fatalf("%s after the reset: %+v", m.chat, r)
		}
	}
	if reqs := e.requestsFor("hello alpha"); len(reqs) != 2 || !slices.Equal(reqs[1].UserTexts, []string{"hello alpha"}) {
		t.Errorf("alpha's thread after the limit: %d requests, last user texts %q; want the message once", len(reqs), reqs[len(reqs)-1].UserTexts)
	}
	u := d.status().Snapshot.Usage
	if a := u["alpha"]; a.InputTokens != 20 || a.CachedInputTokens != 8 || a.OutputTokens != 6 || a.ReasoningOutputTokens != 4 || a.Turns != 2 {
		t.Errorf("alpha's totals %+v, want 2×(10 in, 4 cached, 3 out, 2 reasoning) over 2 turns (the one that met the limit used none)", a)
	}
	if b := u["beta"]; b.InputTokens != 10 || b.OutputTokens != 3 {
		t.Errorf("beta's totals %+v", b)
	}
	if r := c.send("alpha", "/status"); !strings.Contains(r.Text, "tokens: 20 in (8 cached), 6 out (4 reasoning)") || !strings.Contains(r.Text, "5h limit 12% used") {
		t.Errorf("/status = %q", r.Text)
	}
	if _, out := runStatus(t, "--state-dir", e.stateDir); !strings.Contains(out, "usage limits:  primary 12% of 5h") || !strings.Contains(out, "REASONING") {
		t.Errorf("status table lacks limits or usage:\n%s", out)
	}
	f := scrapeMetrics(t, d.ready.Daemon.MetricsListen, "")
	for typ, want := range map[string]float64{"input": 30, "cached_input": 12, "output": 9, "reasoning": 6} {
		if v := f.MustValue(t, "codex_warm_tokens_total", metricstest.Labels{"kind": "local", "type": typ}); v != want {
			t.Errorf("tokens{local,%s} = %v, want %v", typ, v, want)
		}
	}
	if v := f.MustValue(t, "codex_warm_usage_limit_used_percent", metricstest.Labels{"window": "primary"}); v != 12 {
		t.Errorf("primary used percent %v", v)
	}
	if v := f.MustValue(t, "codex_warm_usage_limited", nil); v != 0 {
		t.Errorf("usage_limited %v after the reset", v)
	}
	d.stop(stopTimeout)

	d = e.start()
	if a := d.status().Snapshot.Usage["alpha"]; a.InputTokens != 20 || a.Turns != 2 {
		t.Errorf("alpha's totals after a restart %+v", a)
	}
	d.stop(stopTimeout)
}

// removeLimitsFile forgets the recorded usage limit (the daemon is stopped).
func removeLimitsFile(t *testing.T, e *e2e) {
	t.Helper()
	if err := os.Remove(filepath.Join(e.stateDir, supervisor.LimitsFile)); err != nil {
		t.Fatal(err)
	}
}

// A reset further away than --park-limit is not waited for: the message is answered with the
// limit and the reset time, and its row is acknowledged.
func TestE2EUsageLimitPastParkLimit(t *testing.T) {
	t.Parallel()
	lim := &limitSwitch{resetIn: 5 * 24 * time.Hour, on: true}
	e := newE2E(t, e2eConfig{Script: lim.script, Platform: moleculetest.Config{AckEnabled: true}})
	d := e.start("--park-limit", "1h")
	e.plat.Enqueue(moleculetest.CanvasMessage("far away").WithSeq(1))
	d.waitPlatform("the answer", func() bool { return len(e.plat.Notifies()) == 1 })
	d.waitPlatform("the mailbox ack", func() bool { return slices.Contains(e.plat.Acks(), int64(1)) })
	text := e.plat.Notifies()[0].Message
	if !strings.Contains(text, "usage limit reached: the account's usage resets at") || !strings.Contains(text, "(in 5d0h)") {
		t.Errorf("answer %q, want the limit and the reset", text)
	}
	if st := d.bridgeStats(); st.ParkedTooLong != 1 || st.Parked != 0 {
		t.Errorf("bridge stats %+v", st)
	}
	d.stop(stopTimeout)
}
