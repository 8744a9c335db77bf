package molecule

import (
	"fmt"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

// The real limiter (MOLECULE.md section 9) is a fixed window per key, refilled whole at once,
// and its X-RateLimit-Reset and Retry-After are whole seconds, truncated: "0" means under a
// second. 40 canvas messages in 10 s across a window's edge, under RATE_LIMIT=100 with the
// production timers: each is answered once, and no call meets a 429 at the window's edge (the
// daemon comes back neither early nor all at once). The bubble's clock is the fake's, so its
// headers say what the real server's would.
func TestBurstAcrossWindowEdgeMeetsNo429(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{AckEnabled: true, OrgID: "org-7"})
	synctest.Test(t, func(t *testing.T) {
		log, _ := newTestLogger(t)
		cfg := testConfig(p, t.TempDir(), chattest.NewAnswerer(nil), log)
		p.SetRateLimit(100, time.Minute)
		cfg.HTTPClient = &http.Client{Transport: p.Transport()}
		cfg.PollInterval = DefaultPollInterval
		cfg.HeartbeatInterval = DefaultHeartbeatInterval
		cfg.RetryInitial, cfg.RetryMax = DefaultRetryInitial, DefaultRetryMax
		cfg.EventStream, cfg.SafetyPollInterval = true, DefaultSafetyPollInterval
		m, stop := runIn(t, cfg)
		defer stop()

		// The burst starts 50 s into the bucket's first window and ends 10 s later, past its edge.
		time.Sleep(50 * time.Second)
		for i := range 40 {
			p.Enqueue(moleculetest.CanvasMessage(fmt.Sprintf("message %d", i)).WithSeq(int64(i + 1)))
			time.Sleep(250 * time.Millisecond)
		}
		time.Sleep(3 * time.Minute)
		synctest.Wait()

		if s := m.Stats(); s.Delivered != 40 || s.Received != 40 {
			t.Errorf("stats = %+v, want 40 messages received and delivered", s)
		}
		seen := map[string]int{}
		for _, n := range p.Notifies() {
			seen[n.Message]++
		}
		for text, n := range seen {
			if n != 1 {
				t.Errorf("%q answered %d times", text, n)
			}
		}
		calls := p.Calls()
		perWindow := map[int]int{}
		for _, c := range calls {
			perWindow[int(c.At.Sub(calls[0].At)/time.Minute)]++
		}
		t.Logf("%d calls; per window: %v", len(calls), perWindow)
		// The burst spent the first window's budget, so calls were held across its edge; a tenth
		// of the org's bucket stayed with its canvas users.
		if perWindow[0] < 80 || perWindow[0] > 90 {
			t.Errorf("%d calls in the first window of 100, want the budget spent down to the tenth kept (80..90)", perWindow[0])
		}
		for _, c := range calls {
			if c.Status == http.StatusTooManyRequests {
				t.Errorf("%s at %s answered 429 (Retry-After %q, X-RateLimit-Reset %q)",
					c.Route, c.At.Format("15:04:05.000"), c.Answer.Get("Retry-After"), c.Answer.Get("X-RateLimit-Reset"))
			}
		}
	})
}

// Requests per message, counted as the real server was measured (MOLECULE.md section 9): the
// calls of a stretch with messages less those of an idle stretch as long. One canvas message
// brings three events (two ACTIVITY_LOGGED, one USER_MESSAGE, all with its message_id), which
// must not each wake a poll; acks go out once the daemon is idle, or once a safety-poll
// interval. Targets: at most 3 for a lone message, at most 2.5 a message over a burst of 40.
func TestRequestsPerMessage(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{AckEnabled: true, OrgID: "org-7"})
	synctest.Test(t, func(t *testing.T) {
		log, _ := newTestLogger(t)
		cfg := testConfig(p, t.TempDir(), chattest.NewAnswerer(nil), log)
		p.SetRateLimit(moleculetest.DefaultRateLimit, time.Minute)
		cfg.HTTPClient = &http.Client{Transport: p.Transport()}
		cfg.PollInterval = DefaultPollInterval
		cfg.HeartbeatInterval = DefaultHeartbeatInterval
		cfg.RetryInitial, cfg.RetryMax = DefaultRetryInitial, DefaultRetryMax
		cfg.EventStream, cfg.SafetyPollInterval = true, DefaultSafetyPollInterval
		m, stop := runIn(t, cfg)
		defer stop()
		const stretch = 2 * time.Minute
		count := func(body func()) int {
			before := len(p.Calls())
			end := time.Now().Add(stretch)
			body()
			time.Sleep(time.Until(end))
			synctest.Wait()
			return len(p.Calls()) - before
		}
		time.Sleep(10 * time.Second) // past the start's register, catch-up and connect
		idle := count(func() {})
		seq := int64(0)
		send := func(n int) {
			for range n {
				seq++
				p.Enqueue(moleculetest.CanvasMessage(fmt.Sprintf("message %d", seq)).WithSeq(seq).WithMessageID(fmt.Sprintf("msg-%d", seq)))
				time.Sleep(250 * time.Millisecond)
			}
		}
		lone := count(func() { send(1) })
		burst := count(func() { send(40) })
		if s := m.Stats(); s.Delivered != 41 {
			t.Fatalf("stats = %+v, want 41 delivered", s)
		}
		perLone, perBurst := float64(lone-idle), float64(burst-idle)/40
		t.Logf("idle %d calls in %v; lone message %.1f requests; burst %.2f a message", idle, stretch, perLone, perBurst)
		if perLone > 3 || perBurst > 2.5 {
			t.Errorf("requests per message: lone %.1f (want <= 3), burst %.2f (want <= 2.5)", perLone, perBurst)
		}
	})
}
