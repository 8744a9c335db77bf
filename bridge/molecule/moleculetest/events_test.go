package moleculetest_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

// openStream sends GET /workspaces/{ws}/events/stream with token through hc.
func openStream(ctx context.Context, t *testing.T, hc *http.Client, p *moleculetest.Platform, ws, token string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL()+"/workspaces/"+ws+"/events/stream", nil)
	must(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	must(t, err)
	return resp
}

// sse reads a stream's frames.
type sse struct {
	t *testing.T
	r *bufio.Reader
}

func newSSE(t *testing.T, body io.Reader) *sse { return &sse{t: t, r: bufio.NewReader(body)} }

// frame reads one frame: its lines up to the blank line that ends it.
func (s *sse) frame() (string, error) {
	var lines []string
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return strings.Join(lines, "\n") + line, err
		}
		if line == "\n" {
			return strings.Join(lines, "\n"), nil
		}
		lines = append(lines, strings.TrimSuffix(line, "\n"))
	}
}

// event reads one frame and decodes it as the platform frames an event: one data line holding
// exactly {"type","timestamp","data"}.
func (s *sse) event() moleculetest.Event {
	s.t.Helper()
	f, err := s.frame()
	if err != nil {
		s.t.Fatalf("reading a frame: %q, %v", f, err)
	}
	raw, ok := strings.CutPrefix(f, "data: ")
	if !ok || strings.Contains(raw, "\n") {
		s.t.Fatalf("frame %q, want one data line", f)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &keys); err != nil || len(keys) != 3 {
		s.t.Fatalf("frame %q: %v, want exactly type, timestamp and data", raw, err)
	}
	var ev moleculetest.Event
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ev); err != nil || ev.Type == "" || ev.Timestamp == 0 || !bytes.HasPrefix(ev.Data, []byte("{")) {
		s.t.Fatalf("frame %q: %v", raw, err)
	}
	return ev
}

// ping reads the stream's first frame, which must be the ": ping" comment.
func (s *sse) ping() {
	s.t.Helper()
	if f, err := s.frame(); err != nil || f != ": ping" {
		s.t.Fatalf("first frame %q, %v; want the ping comment", f, err)
	}
}

// until reads events up to one of type mark and returns those before it.
func (s *sse) until(mark string) []moleculetest.Event {
	s.t.Helper()
	var out []moleculetest.Event
	for {
		ev := s.event()
		if ev.Type == mark {
			return out
		}
		out = append(out, ev)
	}
}

func types(evs []moleculetest.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

// The stream over the loopback server: the headers the platform sends, the ping, frames of
// {"type","timestamp","data"}; each connect recorded and counted; a closed body ends it.
func TestEventStreamFrames(t *testing.T) {
	p := moleculetest.NewPlatform(t, moleculetest.Config{RateLimit: 10})
	defer http.DefaultClient.CloseIdleConnections()
	resp := openStream(t.Context(), t, http.DefaultClient, p, p.WorkspaceID(), p.Token())
	defer resp.Body.Close()
	h := resp.Header
	if resp.StatusCode != 200 || h.Get("Content-Type") != "text/event-stream" || h.Get("Cache-Control") != "no-cache" ||
		h.Get("Connection") != "keep-alive" || h.Get("X-Accel-Buffering") != "no" || resp.ContentLength != -1 || h.Get("X-RateLimit-Limit") != "10" || h.Get("X-RateLimit-Remaining") != "9" ||
		h.Get("X-RateLimit-Reset") == "" {
		t.Fatalf("answer %d %v", resp.StatusCode, h)
	}
	s := newSSE(t, resp.Body)
	s.ping()

	before := time.Now().UnixMilli()
	p.Enqueue(moleculetest.CanvasMessage("hello"))
	evs := []moleculetest.Event{s.event(), s.event(), s.event()}
	if got := types(evs); !slices.Equal(got, []string{"ACTIVITY_LOGGED", "USER_MESSAGE", "ACTIVITY_LOGGED"}) {
		t.Fatalf("events of a canvas message: %v", got)
	}
	if ts := evs[0].Timestamp; ts < before || ts > time.Now().UnixMilli() {
		t.Errorf("timestamp %d, want Unix milliseconds of the broadcast", ts)
	}
	ingest, user, queued := evs[0].Payload(), evs[1].Payload(), evs[2].Payload()
	for _, a := range []map[string]any{ingest, queued} {
		for _, k := range []string{"id", "seq", "created_at", "workspace_id"} {
			if _, ok := a[k]; ok {
				t.Errorf("ACTIVITY_LOGGED has %s: %v", k, a)
			}
		}
		if a["activity_type"] != "a2a_receive" || a["method"] != "message/send" || a["source_id"] != nil ||
			a["target_id"] != p.WorkspaceID() || a["status"] != "ok" || a["message_id"] != user["message_id"] || a["request_body"] == nil {
			t.Errorf("ACTIVITY_LOGGED %v", a)
		}
	}
	if ingest["summary"] != "message/send → "+p.WorkspaceID()+" (ingest)" || queued["summary"] != "message/send → "+p.WorkspaceID()+" (queued for poll)" {
		t.Errorf("summaries %q, %q", ingest["summary"], queued["summary"])
	}
	if user["content"] != "hello" || user["workspace_id"] != p.WorkspaceID() || user["message_id"] == "" {
		t.Errorf("USER_MESSAGE %v", user)
	}

	if c := p.CallsTo(moleculetest.RouteEvents); len(c) != 1 || c[0].Status != 200 || c[0].Answer.Get("Content-Type") != "text/event-stream" {
		t.Errorf("calls %+v", c)
	}
	// The platform counts a frame once written, which may be after the client read it.
	must(t, p.WaitFor(t.Context(), func() bool { return p.EventsSent()["ACTIVITY_LOGGED"] == 2 }))
	if p.StreamConnects() != 1 || p.StreamsOpen() != 1 || p.EventsSent()["USER_MESSAGE"] != 1 || p.EventsDropped() != 0 {
		t.Errorf("connects %d, open %d, sent %v, dropped %d", p.StreamConnects(), p.StreamsOpen(), p.EventsSent(), p.EventsDropped())
	}
	resp.Body.Close()
	must(t, p.WaitFor(t.Context(), func() bool { return p.StreamsOpen() == 0 }))
}

// Each write broadcasts what the platform's write broadcasts, and only that; our A2A send
// broadcasts nothing to our workspace.
func TestEventStreamEventsOfWrites(t *testing.T) {
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	defer http.DefaultClient.CloseIdleConnections()
	p.SetPeer("peer-poll", moleculetest.Peer{Mode: moleculetest.PeerPoll})
	c := client{t: t, p: p, token: p.Token()}
	resp := openStream(t.Context(), t, http.DefaultClient, p, p.WorkspaceID(), p.Token())
	defer resp.Body.Close()
	s := newSSE(t, resp.Body)
	s.ping()
	ws := p.WorkspaceID()
	// after runs write and returns the events it broadcast: those before a mark broadcast next.
	after := func(write func()) []moleculetest.Event {
		t.Helper()
		write()
		p.Broadcast("TEST_MARK", map[string]any{})
		return s.until("TEST_MARK")
	}
	post := func(path, body string, want int) func() {
		return func() {
			t.Helper()
			if st, b := c.do(http.MethodPost, path, body); st != want {
				t.Fatalf("POST %s: %d %s, want %d", path, st, b, want)
			}
		}
	}
	hb := func(task string) string {
		return `{"workspace_id":"` + ws + `","error_rate":0,"sample_error":"","active_tasks":1,"current_task":"` + task + `","uptime_seconds":7}`
	}

	evs := after(func() { p.Enqueue(moleculetest.PeerMessage("peer-1", "hi")) })
	if got := types(evs); !slices.Equal(got, []string{"ACTIVITY_LOGGED", "ACTIVITY_LOGGED"}) || evs[1].Payload()["source_id"] != "peer-1" {
		t.Errorf("peer message: %v %s", got, evs[1].Data)
	}
	evs = after(func() { p.Enqueue(moleculetest.DelegationResult(ws, "callee-1", "d-1", "the answer")) })
	if got := types(evs); len(evs) != 1 || got[0] != "DELEGATION_COMPLETE" ||
		!jsonEq(evs[0].Data, `{"delegation_id":"d-1","target_id":"callee-1","response_preview":"the answer"}`) {
		t.Errorf("delegation result: %v %v", got, evs)
	}
	evs = after(func() { p.Enqueue(moleculetest.DelegationFailed(ws, "", "d-2", "callee gone")) })
	if len(evs) != 1 || evs[0].Type != "DELEGATION_FAILED" || !jsonEq(evs[0].Data, `{"delegation_id":"d-2","error":"callee gone"}`) {
		t.Errorf("failed delegation: %v", evs)
	}
	evs = after(post("/registry/heartbeat", hb(""), 200))
	if len(evs) != 1 || evs[0].Type != "WORKSPACE_HEARTBEAT" || !jsonEq(evs[0].Data, `{"active_tasks":1,"uptime_seconds":7}`) {
		t.Errorf("heartbeat: %v", evs)
	}
	evs = after(post("/registry/heartbeat", hb("answering"), 200))
	if got := types(evs); !slices.Equal(got, []string{"TASK_UPDATED", "WORKSPACE_HEARTBEAT"}) ||
		!jsonEq(evs[0].Data, `{"current_task":"answering","active_tasks":1}`) {
		t.Errorf("heartbeat with a new task: %v", evs)
	}
	if evs = after(post("/registry/heartbeat", hb("answering"), 200)); !slices.Equal(types(evs), []string{"WORKSPACE_HEARTBEAT"}) {
		t.Errorf("heartbeat with the same task: %v", types(evs))
	}
	evs = after(post("/registry/heartbeat", strings.Replace(hb("answering"), `"error_rate":0`, `"error_rate":0.6`, 1), 200))
	if got := types(evs); !slices.Equal(got, []string{"WORKSPACE_DEGRADED", "WORKSPACE_HEARTBEAT"}) ||
		!jsonEq(evs[0].Data, `{"error_rate":0.6,"sample_error":""}`) {
		t.Errorf("heartbeat that degrades: %v", evs)
	}
	if evs = after(post("/registry/heartbeat", hb("answering"), 200)); !slices.Equal(types(evs), []string{"WORKSPACE_ONLINE", "WORKSPACE_HEARTBEAT"}) {
		t.Errorf("heartbeat that recovers: %v", types(evs))
	}
	evs = after(post("/registry/register", `{"id":"`+ws+`","delivery_mode":"poll","agent_card":{"name":"a"}}`, 200))
	if len(evs) != 1 || evs[0].Type != "WORKSPACE_ONLINE" || !jsonEq(evs[0].Data, `{"url":"","agent_card":{"name":"a"},"delivery_mode":"poll"}`) {
		t.Errorf("register: %v", evs)
	}
	var files []moleculetest.Uploaded
	evs = after(func() {
		files = p.Upload(moleculetest.File{Name: "in.png", MimeType: "image/png", Data: []byte("png")})
	})
	if len(evs) != 1 || evs[0].Type != "ACTIVITY_LOGGED" || evs[0].Payload()["method"] != "chat_upload_receive" {
		t.Errorf("canvas upload: %v", evs)
	}
	evs = after(func() { p.Enqueue(p.CanvasFiles("", files...)) })
	if got := types(evs); !slices.Equal(got, []string{"ACTIVITY_LOGGED", "USER_MESSAGE", "ACTIVITY_LOGGED"}) ||
		!jsonEq(evs[1].Data, `{"message_id":"`+evs[0].Payload()["message_id"].(string)+`","content":"","workspace_id":"`+ws+`",`+
			`"attachments":[{"name":"in.png","mimeType":"image/png","uri":"`+files[0].URI+`","size":3}]}`) {
		t.Errorf("canvas message of a file: %v", evs)
	}
	evs = after(post("/workspaces/"+ws+"/notify", `{"message":"done","attachments":[{"uri":"https://x/a.txt","name":"a.txt"}]}`, 200))
	if len(evs) != 1 || evs[0].Type != "AGENT_MESSAGE" || !jsonEq(evs[0].Data,
		`{"message":"done","workspace_id":"`+ws+`","name":"`+ws+`","attachments":[{"uri":"https://x/a.txt","name":"a.txt"}]}`) {
		t.Errorf("notify: %v", evs)
	}
	evs = after(func() {
		if st, b := c.multipart("/workspaces/"+ws+"/chat/uploads", map[string]string{"out.txt": "x"}); st != 200 {
			t.Fatalf("chat/uploads: %d %s", st, b)
		}
	})
	if len(evs) != 1 || evs[0].Type != "ACTIVITY_LOGGED" {
		t.Fatalf("chat/uploads: %v", types(evs))
	}
	up := evs[0].Payload()
	body, _ := up["request_body"].(map[string]any)
	if up["method"] != "chat_upload_receive" || up["source_id"] != nil || up["summary"] != "chat_upload_receive: out.txt" || body["file_id"] == nil {
		t.Errorf("chat/uploads' echo row: %v", up)
	}
	a2a := `{"jsonrpc":"2.0","id":"1","method":"message/send","params":{"message":{"role":"user","messageId":"m1","parts":[{"kind":"text","text":"a"}]}}}`
	if evs = after(post("/workspaces/peer-poll/a2a", a2a, 200)); len(evs) != 0 {
		t.Errorf("our A2A send broadcast %v to our workspace, want nothing", types(evs))
	}
	evs = after(post("/workspaces/"+ws+"/activity", `{"activity_type":"agent_log","source_id":"`+ws+`","target_id":"`+ws+`","summary":"🛠 shell(ls)","status":"ok","method":"shell"}`, 200))
	if len(evs) != 1 || evs[0].Type != "ACTIVITY_LOGGED" || !jsonEq(evs[0].Data,
		`{"activity_type":"agent_log","method":"shell","summary":"🛠 shell(ls)","status":"ok","source_id":"`+ws+`","target_id":"`+ws+`","duration_ms":null}`) {
		t.Errorf("agent_log report: %v", evs)
	}
	if evs = after(post("/workspaces/"+ws+"/chat-session/new", ``, 200)); len(evs) != 1 || evs[0].Type != "SESSION_RESET" {
		t.Errorf("chat-session/new: %v", types(evs))
	}
	if evs = after(p.Pause); len(evs) != 1 || evs[0].Type != "WORKSPACE_PAUSED" {
		t.Errorf("pause: %v", types(evs))
	}
}

// jsonEq reports whether raw is the JSON value want.
func jsonEq(raw []byte, want string) bool {
	var a, b any
	return json.Unmarshal(raw, &a) == nil && json.Unmarshal([]byte(want), &b) == nil && reflect.DeepEqual(a, b)
}

// Only this workspace's stream, and only with its own token; without the route, 404 whatever
// the token; the route switched off ends the open streams.
func TestEventStreamAuthAndAbsence(t *testing.T) {
	p := moleculetest.NewPlatform(t, moleculetest.Config{NoEventStream: true})
	defer http.DefaultClient.CloseIdleConnections()
	ws := p.WorkspaceID()
	status := func(ws, token string) int {
		resp := openStream(t.Context(), t, http.DefaultClient, p, ws, token)
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := status(ws, "wrong"); st != 404 {
		t.Errorf("no stream route, wrong token: %d, want 404", st)
	}
	if st := status(ws, p.Token()); st != 404 || p.CountCalls(moleculetest.RouteEvents, 404) != 2 {
		t.Errorf("no stream route: %d, %d calls of 404", st, p.CountCalls(moleculetest.RouteEvents, 404))
	}
	p.SetEventStream(true)
	if st, _, b := get(t, p, "/workspaces/"+ws+"/events/stream", map[string]string{"Authorization": "Bearer wrong"}); st != 401 ||
		!strings.Contains(string(b), "invalid workspace auth token") {
		t.Errorf("wrong token: %d %s, want 401", st, b)
	}
	if st := status("ws-other", p.Token()); st != 401 {
		t.Errorf("another workspace's stream: %d, want 401 (the token is bound to its workspace)", st)
	}
	if p.StreamConnects() != 0 {
		t.Errorf("%d connects counted for refused streams", p.StreamConnects())
	}

	resp := openStream(t.Context(), t, http.DefaultClient, p, ws, p.Token())
	defer resp.Body.Close()
	s := newSSE(t, resp.Body)
	s.ping()
	p.SetEventStream(false)
	if f, err := s.frame(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the route was switched off: %q, %v; want the end of the stream", f, err)
	}
	if st := status(ws, p.Token()); st != 404 {
		t.Errorf("switched off: %d, want 404", st)
	}
}

// A connect costs one request of the bucket, refused with 429 once it is spent; the tenant guard
// and injected failures apply as to every route.
func TestEventStreamRateLimitGuardAndFailures(t *testing.T) {
	p := moleculetest.NewPlatform(t, moleculetest.Config{RateLimit: 2})
	defer http.DefaultClient.CloseIdleConnections()
	path := "/workspaces/" + p.WorkspaceID() + "/events/stream"
	auth := map[string]string{"Authorization": "Bearer " + p.Token()}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	for i, want := range []string{"1", "0"} {
		resp := openStream(ctx, t, http.DefaultClient, p, p.WorkspaceID(), p.Token())
		defer resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Remaining") != want {
			t.Fatalf("connect %d: %d remaining %q, want %s", i, resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"), want)
		}
	}
	if st, h, b := get(t, p, path, auth); st != 429 || h.Get("Retry-After") == "" || !strings.Contains(string(b), "rate limit exceeded") {
		t.Errorf("third connect: %d %v %s, want 429", st, h, b)
	}
	if n := p.CountCalls(moleculetest.RouteEvents, 0); n != 3 || p.StreamConnects() != 2 || p.StreamsOpen() != 2 {
		t.Errorf("%d calls, %d connects, %d open; want 3, 2, 2", n, p.StreamConnects(), p.StreamsOpen())
	}
	cancel()
	must(t, p.WaitFor(t.Context(), func() bool { return p.StreamsOpen() == 0 }))

	p.SetRateLimit(-1, 0)
	p.SetOrgID("org-1")
	if st, _, b := get(t, p, path, auth); st != 400 || !strings.Contains(string(b), moleculetest.TenantOrgHeaderRequired) {
		t.Errorf("without the org header: %d %s", st, b)
	}
	p.SetOrgID("")
	p.FailNext(moleculetest.RouteEvents, 1, http.StatusBadGateway)
	if st, _, _ := get(t, p, path, auth); st != 502 {
		t.Errorf("injected failure: %d, want 502", st)
	}
}

// Through Transport in a synctest bubble: RoundTrip returns with the ping while the handler
// streams; nothing is written after it until an event (no keepalive); closing the body or
// ending the request's context ends the handler; a stream cut by CutStreams or by
// EventCutEvery ends with EOF; a hung connect waits for the client's timeout in bubble time.
func TestEventStreamThroughTransport(t *testing.T) {
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	synctest.Test(t, func(t *testing.T) {
		hc := &http.Client{Transport: p.Transport()}
		resp := openStream(context.Background(), t, hc, p, p.WorkspaceID(), p.Token())
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("answer %d %v", resp.StatusCode, resp.Header)
		}
		s := newSSE(t, resp.Body)
		s.ping()

		got := make(chan string, 1)
		go func() {
			f, _ := s.frame()
			got <- f
		}()
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		select {
		case f := <-got:
			t.Fatalf("the stream wrote %q with no event", f)
		default:
		}
		p.Enqueue(moleculetest.PeerMessage("peer-1", "hi"))
		if f := <-got; !strings.HasPrefix(f, `data: {"type":"ACTIVITY_LOGGED"`) {
			t.Fatalf("frame %q", f)
		}
		resp.Body.Close()
		synctest.Wait()
		if p.StreamsOpen() != 0 {
			t.Fatal("the handler outlived its closed body")
		}

		ctx, cancel := context.WithCancel(context.Background())
		resp = openStream(ctx, t, hc, p, p.WorkspaceID(), p.Token())
		s = newSSE(t, resp.Body)
		s.ping()
		cancel()
		if _, err := s.frame(); !errors.Is(err, context.Canceled) {
			t.Fatalf("read after the request's context ended: %v", err)
		}
		resp.Body.Close()

		resp = openStream(context.Background(), t, hc, p, p.WorkspaceID(), p.Token())
		s = newSSE(t, resp.Body)
		s.ping()
		if n := p.CutStreams(); n != 1 {
			t.Fatalf("CutStreams ended %d streams", n)
		}
		if _, err := s.frame(); !errors.Is(err, io.EOF) {
			t.Fatalf("read after CutStreams: %v", err)
		}
		resp.Body.Close()

		p.SetEventCutEvery(30 * time.Second)
		start := time.Now()
		resp = openStream(context.Background(), t, hc, p, p.WorkspaceID(), p.Token())
		s = newSSE(t, resp.Body)
		s.ping()
		if _, err := s.frame(); !errors.Is(err, io.EOF) || time.Since(start) != 30*time.Second {
			t.Fatalf("cut every 30 s: %v after %v", err, time.Since(start))
		}
		resp.Body.Close()
		p.SetEventCutEvery(0)

		p.HangNext(moleculetest.RouteEvents, 1)
		start = time.Now()
		req, _ := http.NewRequest(http.MethodGet, p.URL()+"/workspaces/"+p.WorkspaceID()+"/events/stream", nil)
		req.Header.Set("Authorization", "Bearer "+p.Token())
		if _, err := (&http.Client{Transport: p.Transport(), Timeout: 5 * time.Second}).Do(req); err == nil || time.Since(start) != 5*time.Second {
			t.Fatalf("hung connect: %v after %v, want the client's 5 s timeout", err, time.Since(start))
		}
		synctest.Wait()
		if n := p.StreamConnects(); n != 4 {
			t.Errorf("%d connects, want 4", n)
		}
	})
}

// A subscriber holds EventBuffer events: with its client not reading, the rest are dropped and
// counted, and the ones held arrive once it reads again.
func TestEventStreamDropsWhenFull(t *testing.T) {
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	synctest.Test(t, func(t *testing.T) {
		resp := openStream(context.Background(), t, &http.Client{Transport: p.Transport()}, p, p.WorkspaceID(), p.Token())
		defer resp.Body.Close()
		s := newSSE(t, resp.Body)
		s.ping()
		synctest.Wait()
		const n = 100
		for i := range n {
			p.Broadcast("TEST", map[string]int{"i": i})
		}
		synctest.Wait()
		// The handler may have taken one event and wait to write it: 64 or 65 are held.
		dropped := p.EventsDropped()
		if dropped != n-moleculetest.EventBuffer && dropped != n-moleculetest.EventBuffer-1 {
			t.Fatalf("%d dropped of %d with a buffer of %d", dropped, n, moleculetest.EventBuffer)
		}
		for i := range n - dropped {
			if ev := s.event(); !jsonEq(ev.Data, `{"i":`+strconv.Itoa(i)+`}`) {
				t.Fatalf("event %d is %s: the events held come in order", i, ev.Data)
			}
		}
		synctest.Wait()
		if sent := p.EventsSent()["TEST"]; sent != n-dropped {
			t.Fatalf("%d sent, %d dropped of %d", sent, dropped, n)
		}
	})
}

// EventDropRate drops that share of the events at random, by the seeded source.
func TestEventStreamDropRate(t *testing.T) {
	p := moleculetest.NewPlatform(t, moleculetest.Config{EventDropRate: 0.5, Seed: 7})
	synctest.Test(t, func(t *testing.T) {
		resp := openStream(context.Background(), t, &http.Client{Transport: p.Transport()}, p, p.WorkspaceID(), p.Token())
		defer resp.Body.Close()
		s := newSSE(t, resp.Body)
		s.ping()
		got := make(chan int)
		go func() {
			n := 0
			for {
				if _, err := s.frame(); err != nil {
					got <- n
					return
				}
				n++
			}
		}()
		const n = 400
		for i := range n {
			p.Broadcast("TEST", map[string]int{"i": i})
			synctest.Wait() // the client reads each before the next: none is dropped for a full buffer
		}
		p.CutStreams()
		received := <-got
		if dropped := p.EventsDropped(); received+dropped != n || dropped < n/4 || dropped > 3*n/4 {
			t.Fatalf("%d received, %d dropped of %d at a rate of 0.5", received, dropped, n)
		}
	})
}

// POST /workspaces/{ws}/activity as activity.go Report: the row stored with source_id = the
// workspace and seen by a poll of its type only; a foreign source_id 403, a missing or unknown
// activity_type 400, another workspace 401.
func TestReportActivity(t *testing.T) {
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	defer http.DefaultClient.CloseIdleConnections()
	c := client{t: t, p: p, token: p.Token()}
	ws := p.WorkspaceID()
	path := "/workspaces/" + ws + "/activity"
	chip := `{"activity_type":"agent_log","source_id":"` + ws + `","target_id":"` + ws + `","summary":"🛠 shell(ls)","status":"error","method":"shell"}`
	if st, b := c.do(http.MethodPost, path, chip); st != 200 || !jsonEq(b, `{"status":"logged"}`) {
		t.Fatalf("agent_log: %d %s", st, b)
	}
	logs := p.AgentLogs()
	if len(logs) != 1 || logs[0].Summary != "🛠 shell(ls)" || logs[0].Status != "error" || logs[0].Method != "shell" ||
		logs[0].SourceID != ws || logs[0].TargetID != ws || logs[0].RowID == "" {
		t.Fatalf("agent logs %+v", logs)
	}
	if st, b := c.do(http.MethodGet, path+"?type=a2a_receive&since_secs=60", ""); st != 200 || !bytes.Equal(bytes.TrimSpace(b), []byte("[]")) {
		t.Errorf("a2a_receive poll after an agent_log: %d %s, want no row", st, b)
	}
	if st, _ := c.do(http.MethodPost, path, `{"activity_type":"a2a_receive","summary":"self"}`); st != 200 {
		t.Fatalf("self-reported a2a_receive: %d", st)
	}
	_, b := c.do(http.MethodGet, path+"?type=a2a_receive&since_secs=60", "")
	var rows []map[string]any
	if err := json.Unmarshal(b, &rows); err != nil || len(rows) != 1 || rows[0]["source_id"] != ws || rows[0]["status"] != "ok" || rows[0]["summary"] != "self" {
		t.Errorf("self-reported row: %s, want it with source_id = the workspace and status ok", b)
	}
	for _, tc := range []struct {
		body string
		want int
	}{
		{`{"activity_type":"agent_log","source_id":"ws-other","summary":"x"}`, 403},
		{`{"summary":"x"}`, 400},
		{`{"activity_type":"chip"}`, 400},
		{`{"activity_type":"agent_log","summary":5}`, 400},
		{`not json`, 400},
	} {
		if st, b := c.do(http.MethodPost, path, tc.body); st != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.body, st, b, tc.want)
		}
	}
	if st, _ := c.do(http.MethodPost, "/workspaces/ws-other/activity", chip); st != 401 {
		t.Errorf("another workspace: %d, want 401", st)
	}
	if n := len(p.Reports()); n != 2 {
		t.Errorf("%d reports kept, want 2", n)
	}
}

// Events keeps what was broadcast with no stream open (nothing is counted as dropped then), the
// latest EventLogSize of it.
func TestEventsLog(t *testing.T) {
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	p.Enqueue(moleculetest.CanvasMessage("hi"))
	if got := types(p.Events()); !slices.Equal(got, []string{"ACTIVITY_LOGGED", "USER_MESSAGE", "ACTIVITY_LOGGED"}) || p.EventsDropped() != 0 {
		t.Fatalf("events %v, %d dropped", got, p.EventsDropped())
	}
	for i := range 2 * moleculetest.EventLogSize {
		p.Broadcast("TEST", map[string]int{"i": i})
	}
	evs := p.Events()
	if len(evs) != moleculetest.EventLogSize || !jsonEq(evs[0].Data, `{"i":`+strconv.Itoa(moleculetest.EventLogSize)+`}`) {
		t.Fatalf("%d events kept, the first %v", len(evs), evs[0])
	}
}
