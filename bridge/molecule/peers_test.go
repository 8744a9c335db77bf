package molecule

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"
	"testing/synctest"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

// The inbox runs a delegation result's turn in the callee's chat with the result's text and
// answers on the canvas; the callee gets nothing.
func TestDelegationResultTurnInCalleeChat(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	a := chattest.NewAnswerer(nil)
	log, _ := newTestLogger(t)
	start(t, testConfig(p, t.TempDir(), a, log))
	p.Enqueue(moleculetest.DelegationResult(p.WorkspaceID(), "callee-1", "d-1", "the answer is 42"),
		moleculetest.DelegationFailed(p.WorkspaceID(), "callee-2", "d-2", "workspace agent busy"))
	must(t, p.WaitFor(waitCtx(t), func() bool { return len(p.Notifies()) == 2 }))
	byKey := map[string]string{}
	for _, c := range a.Calls() {
		byKey[c.Key] = c.Text
	}
	if got := byKey["peer:callee-1"]; !strings.Contains(got, "the answer is 42") {
		t.Errorf("callee-1's chat got %q, want the result's text", got)
	}
	if got := byKey["peer:callee-2"]; !strings.Contains(got, "failed: workspace agent busy") {
		t.Errorf("callee-2's chat got %q, want the failure told as one", got)
	}
	if _, ok := byKey["peer:"+p.WorkspaceID()]; ok || len(p.A2ASends()) != 0 {
		t.Fatalf("turns %v, sends %v: want no chat with ourselves and nothing sent to the callees", byKey, p.A2ASends())
	}
}

// A push peer answers a send only after its whole turn: a turn longer than the platform-call
// timeout (45 s of fake time here) is waited for, not cut off and sent again (a second copy
// is a second turn for a push peer). The send carries X-Timeout.
func TestPushPeerAnswersLate(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	synctest.Test(t, func(t *testing.T) {
		turn := make(chan struct{})
		p.SetPeer("peer-push", moleculetest.Peer{Mode: moleculetest.PeerPush, Turn: turn, Answer: "my own answer"})
		log, _ := newTestLogger(t)
		a := chattest.NewAnswerer(nil)
		cfg := testConfig(p, t.TempDir(), a, log)
		cfg.HTTPClient = &http.Client{Transport: p.Transport()}
		cfg.PollInterval = time.Second
		cfg.RetryInitial = time.Second
		m, err := New(cfg)
		must(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		p.Enqueue(moleculetest.PeerMessage("peer-push", "long job"))
		time.Sleep(45 * time.Second) // the peer's turn, in fake time
		close(turn)
		time.Sleep(5 * time.Second)
		s := m.Stats()
		cancel()
		must(t, <-done)
		if turns := p.PushTurns("peer-push"); turns != 1 || s.Delivered != 1 || s.DeliveryRetries != 0 {
			t.Fatalf("%d turns of the push peer, stats %+v: want one turn, delivered once, no retry", turns, s)
		}
		send := p.A2ASends()[0]
		if got := send.Header.Get("X-Timeout"); got != "1800" {
			t.Errorf("X-Timeout = %q, want 1800 (the platform's 30 min for an agent's send)", got)
		}
		for _, c := range a.Calls() {
			if strings.Contains(c.Text, "my own answer") {
				t.Fatalf("the push peer's answer to our reply was taken as a message: %+v", a.Calls())
			}
		}
		if len(a.Calls()) != 1 {
			t.Fatalf("turns %+v, want the one message only", a.Calls())
		}
	})
}

// A reply names the message it answers (params.message.metadata.in_reply_to): the peer's
// messageId.
func TestReplyNamesTheMessageItAnswers(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	a := chattest.NewAnswerer(nil)
	log, _ := newTestLogger(t)
	start(t, testConfig(p, t.TempDir(), a, log))
	row := moleculetest.PeerMessage("peer-1", "hello")
	row["request_body"].(map[string]any)["params"].(map[string]any)["message"].(map[string]any)["messageId"] = "peer-msg-1"
	p.Enqueue(row)
	must(t, p.WaitFor(waitCtx(t), func() bool { return len(p.A2ASends()) == 1 }))
	if got := p.A2ASends()[0].Metadata["in_reply_to"]; got != "peer-msg-1" {
		t.Fatalf("metadata = %v, want in_reply_to peer-msg-1", p.A2ASends()[0].Metadata)
	}
}

// 202 queued (peer busy) is a delivery; 503 is retried, not before its Retry-After; 402, 403
// and 413 are refusals: logged with the reason, counted, the row acknowledged, not retried.
func TestA2AAnswers(t *testing.T) {
	t.Parallel()
	t.Run("202 queued", func(t *testing.T) {
		t.Parallel()
		p := moleculetest.NewPlatform(t, moleculetest.Config{})
		p.SetPeer("peer-busy", moleculetest.Peer{Mode: moleculetest.PeerPush})
		p.BusyQueueNext(1)
		log, _ := newTestLogger(t)
		r := start(t, testConfig(p, t.TempDir(), chattest.NewAnswerer(nil), log))
		p.Enqueue(moleculetest.PeerMessage("peer-busy", "q"))
		must(t, p.WaitFor(waitCtx(t), statsCond(r.m, func(s Stats) bool { return s.Delivered == 1 && s.Unacked == 0 })))
		if d := p.PeerDeliveries("peer-busy"); len(d) != 1 || d[0].How != "queued" || p.CountCalls(moleculetest.RouteA2A, 0) != 1 {
			t.Fatalf("deliveries %v after %d sends, want one queued", d, p.CountCalls(moleculetest.RouteA2A, 0))
		}
	})
	t.Run("503 Retry-After", func(t *testing.T) {
		t.Parallel()
		p := moleculetest.NewPlatform(t, moleculetest.Config{})
		synctest.Test(t, func(t *testing.T) {
			p.SetPeer("peer-restarting", moleculetest.Peer{Mode: moleculetest.PeerPoll})
			p.FailNextWith(moleculetest.RouteA2A, 2, http.StatusServiceUnavailable, http.Header{"Retry-After": {"8"}})
			log, _ := newTestLogger(t)
			cfg := testConfig(p, t.TempDir(), chattest.NewAnswerer(nil), log)
			cfg.HTTPClient = &http.Client{Transport: p.Transport()}
			cfg.RetryInitial, cfg.RetryMax = time.Second, 30*time.Second
			m, err := New(cfg)
			must(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- m.Run(ctx) }()
			p.Enqueue(moleculetest.PeerMessage("peer-restarting", "q"))
			time.Sleep(time.Minute)
			s := m.Stats()
			cancel()
			must(t, <-done)
			calls := p.CallsTo(moleculetest.RouteA2A)
			if len(calls) != 3 || s.Delivered != 1 {
				t.Fatalf("%d sends, stats %+v: want two 503s and a delivery", len(calls), s)
			}
			for i := 1; i < len(calls); i++ {
				if gap := calls[i].At.Sub(calls[i-1].At); gap < 8*time.Second {
					t.Errorf("send %d came %v after a 503 with Retry-After: 8", i+1, gap)
				}
			}
		})
	})
	for _, status := range []int{http.StatusPaymentRequired, http.StatusForbidden, http.StatusRequestEntityTooLarge} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			t.Parallel()
			p := moleculetest.NewPlatform(t, moleculetest.Config{})
			p.FailNext(moleculetest.RouteA2A, 1, status)
			log, logs := newTestLogger(t)
			r := start(t, testConfig(p, t.TempDir(), chattest.NewAnswerer(nil), log))
			p.Enqueue(moleculetest.PeerMessage("peer-x", "q"))
			must(t, p.WaitFor(waitCtx(t), statsCond(r.m, func(s Stats) bool { return s.DeliveryFailed == 1 && s.Unacked == 0 })))
			if n := p.CountCalls(moleculetest.RouteA2A, 0); n != 1 {
				t.Fatalf("%d sends, want one: a refusal is not retried", n)
			}
			lines := logs.FilterMessageSnippet("refused the reply for good").All()
			if len(lines) != 1 || !strings.Contains(lines[0].ContextMap()["reason"].(string), "("+strconv.Itoa(status)) {
				t.Fatalf("log lines %+v, want one naming the reason", lines)
			}
		})
	}
}

// Notify has no deduplication: an attempt that certainly did not reach the platform is retried
// as long as it takes; one whose answer was lost after the request went out is sent once more,
// then given up on (counted), since every copy that lands is a bubble.
func TestNotifyFate(t *testing.T) {
	t.Parallel()
	t.Run("refused connections are retried", func(t *testing.T) {
		t.Parallel()
		p := moleculetest.NewPlatform(t, moleculetest.Config{})
		log, _ := newTestLogger(t)
		cfg := testConfig(p, t.TempDir(), chattest.NewAnswerer(nil), log)
		cfg.HTTPClient = &http.Client{Transport: &refuseNotify{n: 3, next: http.DefaultTransport}}
		r := start(t, cfg)
		p.Enqueue(moleculetest.CanvasMessage("hi"))
		must(t, p.WaitFor(waitCtx(t), statsCond(r.m, func(s Stats) bool { return s.Delivered == 1 })))
		if s := r.m.Stats(); s.DeliveryRetries != 3 || s.DeliveryUnknown != 0 || len(p.Notifies()) != 1 {
			t.Fatalf("stats %+v, %d notifies: want 3 retries and one bubble", s, len(p.Notifies()))
		}
	})
	t.Run("lost answers: one more copy at most", func(t *testing.T) {
		t.Parallel()
		p := moleculetest.NewPlatform(t, moleculetest.Config{})
		p.HangNext(moleculetest.RouteNotify, 5)
		log, _ := newTestLogger(t)
		cfg := testConfig(p, t.TempDir(), chattest.NewAnswerer(nil), log)
		cfg.RequestTimeout = 300 * time.Millisecond
		r := start(t, cfg)
		p.Enqueue(moleculetest.CanvasMessage("hi"))
		must(t, p.WaitFor(waitCtx(t), statsCond(r.m, func(s Stats) bool { return s.DeliveryUnknown == 1 && s.Unacked == 0 })))
		if n := p.CountCalls(moleculetest.RouteNotify, 0); n != 2 {
			t.Fatalf("%d notify attempts, want 2", n)
		}
	})
}

// A notify whose 200 came but whose body broke off was delivered: it is not sent again.
func TestNotifyDeliveredOnStatus(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	log, _ := newTestLogger(t)
	cfg := testConfig(p, t.TempDir(), chattest.NewAnswerer(nil), log)
	cfg.HTTPClient = &http.Client{Transport: breakNotifyBody{next: http.DefaultTransport}}
	r := start(t, cfg)
	p.Enqueue(moleculetest.CanvasMessage("hi"))
	must(t, p.WaitFor(waitCtx(t), statsCond(r.m, func(s Stats) bool { return s.Delivered == 1 && s.Unacked == 0 })))
	if n, s := p.CountCalls(moleculetest.RouteNotify, 0), r.m.Stats(); n != 1 || s.DeliveryRetries != 0 {
		t.Fatalf("%d notifies, stats %+v: want one, no retry", n, s)
	}
}

// breakNotifyBody makes the body of every notify answer fail after its status.
type breakNotifyBody struct{ next http.RoundTripper }

func (b breakNotifyBody) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := b.next.RoundTrip(req)
	if err == nil && strings.HasSuffix(req.URL.Path, "/notify") {
		resp.Body.Close()
		resp.Body = io.NopCloser(iotest.ErrReader(errors.New("connection reset by peer")))
	}
	return resp, err
}

// refuseNotify fails the first n notify requests as a refused connection, before anything is
// sent; everything else goes to next.
type refuseNotify struct {
	n    int
	next http.RoundTripper
}

func (r *refuseNotify) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasSuffix(req.URL.Path, "/notify") && r.n > 0 {
		r.n--
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	return r.next.RoundTrip(req)
}

// Automatic exchanges with one peer are capped: each message read after a reply to the peer
// began counts; a canvas message or a quiet spell starts the count over; a reply being sent keeps
// the count going; messages read before any reply (a backlog) are no exchange at all.
func TestPeerExchangesCap(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	p := newPeerExchanges(3, 10*time.Minute)
	for i := range 25 {
		if n, ok, _ := p.admit("a", at(0), at(i)); !ok || n != 0 {
			t.Fatalf("backlog message %d read before any reply: n=%d ok=%v, want answered, uncounted", i, n, ok)
		}
	}
	// Ping-pong: a reply goes out, the peer's next message is read after it.
	exchange := func(s int) (int, bool, bool) {
		p.sending("a", at(s))(at(s))
		return p.admit("a", at(s+1), at(s+1))
	}
	for i := 1; i <= 3; i++ {
		if n, ok, _ := exchange(10 * i); !ok || n != i {
			t.Fatalf("exchange %d: n=%d ok=%v", i, n, ok)
		}
	}
	if _, ok, first := exchange(40); ok || !first {
		t.Fatalf("4th exchange: ok=%v first=%v, want capped, reported", ok, first)
	}
	if _, ok, first := p.admit("a", at(51), at(51)); ok || first {
		t.Fatalf("5th message: ok=%v first=%v, want capped, not reported again", ok, first)
	}
	if _, ok, _ := exchange(60); ok {
		t.Fatal("capped peer answered")
	}
	p.sending("b", at(60))(at(60))
	if _, ok, _ := p.admit("b", at(61), at(61)); !ok {
		t.Fatal("another peer was capped too")
	}
	p.humanSpoke()
	if n, ok, _ := exchange(70); !ok || n != 1 {
		t.Fatalf("after a canvas message: n=%d ok=%v, want a new count", n, ok)
	}
	done := p.sending("a", at(3600))
	if n, _, _ := p.admit("a", at(3601), at(3601)); n != 2 {
		t.Fatalf("a message while a reply is sent: n=%d, want the count going on", n)
	}
	done(at(3602))
	if n, _, _ := p.admit("a", at(3602+11*60), at(3602+11*60)); n != 1 {
		t.Fatalf("after 11 quiet minutes: n=%d, want a new count", n)
	}
}

// Two agents that would answer each other forever: a push peer that writes back about every
// reply it gets. The daemon answers its first message and PeerExchanges answers to its replies,
// then no more, and the push peer's synchronous answers never become messages; a canvas message
// starts the count over.
func TestPingPongCapped(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	p.SetPeer("peer-echo", moleculetest.Peer{Mode: moleculetest.PeerPush, Echo: "you said: ", Answer: "sync answer"})
	a := chattest.NewAnswerer(nil)
	log, logs := newTestLogger(t)
	cfg := testConfig(p, t.TempDir(), a, log)
	cfg.PeerExchanges = 3
	r := start(t, cfg)
	p.Enqueue(moleculetest.PeerMessage("peer-echo", "hello"))
	must(t, p.WaitFor(waitCtx(t), statsCond(r.m, func(s Stats) bool { return s.PeerCapped >= 1 && s.Unacked == 0 })))
	if n := len(p.A2ASends()); n != 1+3 {
		t.Fatalf("%d replies to the echoing peer, want 4 (its message and 3 exchanges)", n)
	}
	if n := len(logs.FilterMessageSnippet("reached the cap").All()); n != 1 {
		t.Fatalf("%d cap warnings, want 1", n)
	}
	for _, c := range a.Calls() {
		if strings.Contains(c.Text, "sync answer") {
			t.Fatalf("a push peer's synchronous answer became a message: %q", c.Text)
		}
	}
	p.Enqueue(moleculetest.CanvasMessage("go on"))
	must(t, p.WaitFor(waitCtx(t), func() bool { return len(p.Notifies()) == 1 }))
	p.Enqueue(moleculetest.PeerMessage("peer-echo", "again"))
	must(t, p.WaitFor(waitCtx(t), statsCond(r.m, func(s Stats) bool { return s.PeerCapped >= 2 && s.Unacked == 0 })))
	if n := len(p.A2ASends()); n != 8 {
		t.Fatalf("%d replies after the canvas spoke, want 4 more", n)
	}
}
