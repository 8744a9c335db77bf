package appservertest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// fakeServer is the fake codex app-server. It runs in its own process (the helper-process
// pattern), so it exits rather than cleaning up.
type fakeServer struct {
	modes  fakeModes
	stderr io.Writer

	outMu sync.Mutex
	out   io.Writer

	mu          sync.Mutex
	initialized bool
	threads     map[string]*fakeThread
	nextReqID   int64
	refreshed   bool                   // FakeRefreshOnStart: the first turn/start was refused
	waiting     map[int64]chan fakeMsg // server requests awaiting the client's answer
	completed   int

	script   [][]byte          // FakeScript: the lines to play for every turn
	results  map[string]string // FakeScript: ScriptResult overrides, by method
	answers  map[string]int    // FakeScript: answers received, by raw response id
	awaits   map[string]int    // FakeScript: ScriptAwait directives played, by raw id
	answerCh chan struct{}     // FakeScript: closed (and replaced) on every answer
	record   io.Writer         // FakeRecordEnv: every line read from the client
}

type fakeThread struct {
	id           string
	userMessages int
	active       *fakeTurn
	// late starts a turn answered but not yet active (FakeLateStart).
	late func()
}

type fakeTurn struct {
	id          string
	requestID   string // raw JSON id of the turn/start request
	thread      *fakeThread
	interrupted chan struct{}
	once        sync.Once
}

func (t *fakeTurn) interrupt() { t.once.Do(func() { close(t.interrupted) }) }

// fakeMsg is any JSON-RPC message (codex omits the "jsonrpc" member).
type fakeMsg struct {
	ID     *json.RawMessage `json:"id,omitempty"`
	Method string           `json:"method,omitempty"`
	Params json.RawMessage  `json:"params,omitempty"`
	Result json.RawMessage  `json:"result,omitempty"`
	Error  *fakeRPCError    `json:"error,omitempty"`
}

type fakeRPCError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func runFake(mode string, in io.Reader, out, stderr io.Writer) int {
	modes, err := parseFakeModes(mode)
	if err != nil {
		fmt.Fprintf(stderr, "fake app-server: %v\n", err)
		return 64
	}
	if modes.set[FakeStubborn] {
		signal.Ignore(syscall.SIGTERM)
	}
	f := &fakeServer{
		modes:    modes,
		stderr:   stderr,
		out:      out,
		threads:  map[string]*fakeThread{},
		waiting:  map[int64]chan fakeMsg{},
		answers:  map[string]int{},
		awaits:   map[string]int{},
		answerCh: make(chan struct{}),
	}
	if modes.set[FakeScript] {
		script, err := loadFakeScript(os.Getenv(FakeScriptEnv))
		if err != nil {
			fmt.Fprintf(stderr, "fake app-server: %v\n", err)
			return 64
		}
		f.script, f.results = script, map[string]string{}
		for _, line := range script {
			d := string(line)
			if !strings.HasPrefix(d, "#fake:") {
				continue
			}
			ok := d == ScriptComplete || d == ScriptHang || strings.HasPrefix(d, ScriptAwait)
			if rest, isResult := strings.CutPrefix(d, ScriptResult); isResult {
				method, raw, _ := strings.Cut(rest, " ")
				ok = (method == "thread/start" || method == "turn/start") &&
					json.Valid([]byte(strings.NewReplacer("{thread}", "x", "{turn}", "x").Replace(raw)))
				f.results[method] = raw
			}
			if !ok {
				fmt.Fprintf(stderr, "fake app-server: bad directive %q\n", d)
				return 64
			}
		}
	}
	if path := os.Getenv(FakeRecordEnv); path != "" {
		rec, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintf(stderr, "fake app-server: record: %v\n", err)
			return 64
		}
		defer rec.Close()
		f.record = rec
	}
	fmt.Fprintf(stderr, "fake app-server: pid %d mode %q\n", os.Getpid(), mode)
	r := bufio.NewReaderSize(in, 64<<10)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 && f.record != nil {
			// Recorded before it is acted on: once the fake reacted to a line (a script's
			// await went on, say), the line is in the file.
			_, _ = f.record.Write(line)
		}
		if len(line) > 0 {
			f.handleLine(line)
		}
		if err != nil {
			if modes.set[FakeStubborn] {
				fmt.Fprintln(stderr, "fake app-server: stdin closed; staying up (stubborn)")
				select {} // only SIGKILL ends this
			}
			fmt.Fprintln(stderr, "fake app-server: stdin closed; exiting")
			return 0
		}
	}
}

func (f *fakeServer) handleLine(line []byte) {
	var m fakeMsg
	if err := json.Unmarshal(line, &m); err != nil {
		fmt.Fprintf(f.stderr, "fake app-server: bad line from client: %v\n", err)
		return
	}
	switch {
	case m.Method != "" && m.ID != nil:
		f.handleRequest(m)
	case m.Method != "":
		// Notifications from the client (initialized): nothing to do.
	case m.ID != nil:
		f.handleResponse(m)
	}
}

func (f *fakeServer) handleRequest(m fakeMsg) {
	f.mu.Lock()
	initialized := f.initialized
	refuse := f.modes.overload[m.Method] > 0
	if refuse {
		f.modes.overload[m.Method]--
	}
	f.mu.Unlock()
	if refuse {
		// codex refuses before the request reaches its processor, initialized or not.
		f.replyError(m.ID, FakeOverloadedCode, FakeOverloadedMessage)
		return
	}
	if m.Method != "initialize" && !initialized {
		f.replyError(m.ID, -32600, "Not initialized")
		return
	}
	switch m.Method {
	case "initialize":
		if f.modes.set[FakeExitHandshake] {
			fmt.Fprintln(f.stderr, "fake app-server: exiting during handshake (mode exit-handshake)")
			os.Exit(3)
		}
		if f.modes.set[FakeSlowStart] {
			// The read loop goes on, so a client that gave up and closed stdin ends the fake
			// at once; the process exits with the loop, so nothing waits for this goroutine.
			go func() {
				time.Sleep(f.modes.slowStart)
				f.initialize(m)
			}()
			return
		}
		f.initialize(m)
	case "thread/start":
		var p struct {
			Cwd string `json:"cwd"`
		}
		_ = json.Unmarshal(m.Params, &p)
		th := &fakeThread{id: newUUID()}
		f.mu.Lock()
		f.threads[th.id] = th
		f.mu.Unlock()
		if raw, ok := f.results["thread/start"]; ok {
			f.reply(m.ID, json.RawMessage(strings.ReplaceAll(raw, "{thread}", th.id)))
		} else {
			f.reply(m.ID, map[string]any{"thread": fakeThreadObj(th.id, p.Cwd), "model": "fake-model"})
		}
		f.notify("thread/started", map[string]any{"thread": fakeThreadObj(th.id, p.Cwd)})
	case "thread/resume":
		var p struct {
			ThreadID string `json:"threadId"`
			Cwd      string `json:"cwd"`
		}
		_ = json.Unmarshal(m.Params, &p)
		if f.modes.set[FakeUnknownThread] || p.ThreadID == "" {
			f.replyError(m.ID, -32600, "no rollout found for thread id "+p.ThreadID)
			return
		}
		f.mu.Lock()
		if f.threads[p.ThreadID] == nil {
			f.threads[p.ThreadID] = &fakeThread{id: p.ThreadID}
		}
		f.mu.Unlock()
		f.reply(m.ID, map[string]any{"thread": fakeThreadObj(p.ThreadID, p.Cwd), "model": "fake-model"})
	case "thread/unsubscribe":
		// thread_unload_delay_secs = 0: the thread unloads at once unless a turn runs.
		var p struct {
			ThreadID string `json:"threadId"`
		}
		_ = json.Unmarshal(m.Params, &p)
		f.mu.Lock()
		th := f.threads[p.ThreadID]
		busy := th != nil && th.active != nil
		if th != nil && !busy {
			delete(f.threads, p.ThreadID)
		}
		f.mu.Unlock()
		if th == nil {
			f.reply(m.ID, map[string]any{"status": "notLoaded"})
			return
		}
		f.reply(m.ID, map[string]any{"status": "unsubscribed"})
		if !busy {
			f.notify("thread/closed", map[string]any{"threadId": p.ThreadID})
		}
	case "thread/turns/list":
		// Each fake process starts without history, and a resumed thread has none: an empty page.
		f.reply(m.ID, map[string]any{"data": []any{}, "nextCursor": nil})
	case "turn/start":
		if f.modes.set[FakeRefreshOnStart] && f.refreshOnStart() {
			// Off the read loop: the answer to the refresh request comes through it.
			go f.refuseAfterRefresh(m)
			return
		}
		f.startTurn(m)
	case "thread/revert":
		var p struct {
			ThreadID string `json:"threadId"`
		}
		_ = json.Unmarshal(m.Params, &p)
		f.mu.Lock()
		busy := f.modes.revertBusy > 0
		f.modes.revertBusy--
		f.mu.Unlock()
		if busy {
			f.replyError(m.ID, -32600, "thread "+p.ThreadID+" already has an active writer")
			return
		}
		f.reply(m.ID, map[string]any{"thread": fakeThreadObj(p.ThreadID, "")})
	case "account/login/start":
		f.reply(m.ID, map[string]any{"type": "chatgptAuthTokens"})
	case "turn/interrupt":
		var p struct {
			ThreadID string `json:"threadId"`
			TurnID   string `json:"turnId"`
		}
		_ = json.Unmarshal(m.Params, &p)
		f.mu.Lock()
		var active *fakeTurn
		var late func()
		if th := f.threads[p.ThreadID]; th != nil {
			active = th.active
			if active == nil {
				late, th.late = th.late, nil
			}
		}
		f.mu.Unlock()
		switch {
		case active == nil:
			f.replyError(m.ID, -32600, "no active turn to interrupt")
			if late != nil {
				late()
			}
		case active.id != p.TurnID:
			f.replyError(m.ID, -32600, fmt.Sprintf("expected active turn id %s but found %s", active.id, p.TurnID))
		default:
			f.reply(m.ID, map[string]any{})
			if !f.modes.set[FakeIgnoreInterrupt] {
				active.interrupt()
			}
		}
	default:
		f.replyError(m.ID, -32601, "method not found: "+m.Method)
	}
}

// refreshOnStart reports whether this turn/start is the process's first (FakeRefreshOnStart).
func (f *fakeServer) refreshOnStart() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	first := !f.refreshed
	f.refreshed = true
	return first
}

// refuseAfterRefresh asks the client for a new token, waits for its answer and refuses the
// turn/start m as codex 0.171 does when the token changes while it loads its configuration.
func (f *fakeServer) refuseAfterRefresh(m fakeMsg) {
	_, answer := f.serverRequest("account/chatgptAuthTokens/refresh", map[string]any{"reason": "unauthorized"})
	<-answer
	f.replyError(m.ID, -32600, "failed to load configuration: application network permission was revoked")
}

// initialize answers the initialize request m.
func (f *fakeServer) initialize(m fakeMsg) {
	f.mu.Lock()
	f.initialized = true
	f.mu.Unlock()
	home, _ := os.Getwd()
	if h := os.Getenv("CODEX_HOME"); h != "" {
		home = h
	}
	f.reply(m.ID, map[string]any{
		"userAgent": "fake-app-server/0.0.0", "codexHome": home,
		"platformFamily": "unix", "platformOs": "linux",
	})
}

func (f *fakeServer) handleResponse(m fakeMsg) {
	if f.modes.set[FakeScript] {
		f.mu.Lock()
		f.answers[strings.TrimSpace(string(*m.ID))]++
		close(f.answerCh)
		f.answerCh = make(chan struct{})
		f.mu.Unlock()
	}
	id, err := strconv.ParseInt(string(*m.ID), 10, 64)
	if err != nil {
		return
	}
	f.mu.Lock()
	ch := f.waiting[id]
	delete(f.waiting, id)
	f.mu.Unlock()
	if ch != nil {
		ch <- m
	}
}

func (f *fakeServer) startTurn(m fakeMsg) {
	var p struct {
		ThreadID string `json:"threadId"`
		Input    []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"input"`
	}
	_ = json.Unmarshal(m.Params, &p)
	var text []string
	for _, in := range p.Input {
		text = append(text, in.Text)
	}
	f.mu.Lock()
	th := f.threads[p.ThreadID]
	if th == nil {
		f.mu.Unlock()
		f.replyError(m.ID, -32600, "thread not found: "+p.ThreadID)
		return
	}
	if th.active != nil {
		// codex merges a turn/start during an active turn into it and answers with its id.
		id := th.active.id
		f.mu.Unlock()
		f.reply(m.ID, map[string]any{"turn": fakeTurnObj(id, "inProgress", nil, nil)})
		return
	}
	th.userMessages++
	n := th.userMessages
	t := &fakeTurn{id: newUUID(), requestID: strings.TrimSpace(string(*m.ID)), thread: th, interrupted: make(chan struct{})}
	th.active = t
	f.mu.Unlock()

	userText := strings.Join(text, "\n")
	if f.modes.set[FakeEarlyNotify] {
		other := newUUID()
		f.notify("thread/status/changed", map[string]any{"threadId": other, "status": map[string]any{"type": "active"}})
		f.notify("turn/started", map[string]any{"threadId": th.id, "turn": fakeTurnObj(t.id, "inProgress", nil, nil)})
		f.notify("item/completed", map[string]any{"threadId": th.id, "turnId": "stale-" + t.id,
			"item": map[string]any{"type": "agentMessage", "id": "stale", "text": "from another turn", "phase": "final_answer"}})
		f.notify("turn/completed", map[string]any{"threadId": other, "turn": fakeTurnObj(newUUID(), "completed", nil, nil)})
		f.reply(m.ID, map[string]any{"turn": fakeTurnObj(t.id, "inProgress", nil, nil)})
		go f.runTurn(t, userText, n, true)
		return
	}
	if f.modes.set[FakeLateStart] {
		f.mu.Lock()
		th.active = nil
		th.late = func() {
			f.mu.Lock()
			th.active = t
			f.mu.Unlock()
			go f.runTurn(t, userText, n, false)
		}
		f.mu.Unlock()
		f.reply(m.ID, map[string]any{"turn": fakeTurnObj(t.id, "inProgress", nil, nil)})
		return
	}
	if d := f.modes.slowTurnStart; d > 0 {
		time.Sleep(d)
	}
	if raw, ok := f.results["turn/start"]; ok {
		if !strings.Contains(raw, "{turn}") {
			// The client cannot learn this turn's id, so it can neither wait for the turn nor
			// interrupt it: forget it at once, so that the next turn/start starts a new turn
			// instead of joining this one.
			f.mu.Lock()
			th.active = nil
			f.mu.Unlock()
		}
		f.reply(m.ID, json.RawMessage(strings.NewReplacer("{thread}", th.id, "{turn}", t.id).Replace(raw)))
	} else {
		f.reply(m.ID, map[string]any{"turn": fakeTurnObj(t.id, "inProgress", nil, nil)})
	}
	go f.runTurn(t, userText, n, false)
}

func (f *fakeServer) runTurn(t *fakeTurn, text string, n int, startedSent bool) {
	started := time.Now()
	th := t.thread
	f.notify("thread/status/changed", map[string]any{"threadId": th.id, "status": map[string]any{"type": "active", "activeFlags": []any{}}})
	if !startedSent {
		f.notify("turn/started", map[string]any{"threadId": th.id, "turn": fakeTurnObj(t.id, "inProgress", nil, nil)})
	}
	user := map[string]any{"type": "userMessage", "id": "user-" + t.id,
		"content": []any{map[string]any{"type": "text", "text": text, "text_elements": []any{}}}}
	f.itemStarted(t, user)
	f.itemCompleted(t, user)

	complete := func(status string, turnErr map[string]any, items []any) {
		f.notify("thread/status/changed", map[string]any{"threadId": th.id, "status": map[string]any{"type": "idle"}})
		f.mu.Lock()
		th.active = nil
		if status == "completed" {
			f.completed++
		}
		done := f.completed
		f.mu.Unlock()
		ms := time.Since(started).Milliseconds()
		f.notify("turn/completed", map[string]any{"threadId": th.id, "turn": fakeTurnObj(t.id, status, turnErr, items, ms)})
		if f.modes.dieAfter > 0 && done >= f.modes.dieAfter {
			fmt.Fprintf(f.stderr, "fake app-server: exiting after %d turns (mode die-after)\n", done)
			os.Exit(0)
		}
	}
	waitInterrupt := func() {
		<-t.interrupted
		complete("interrupted", nil, []any{})
	}

	if f.modes.set[FakeHangFirst] && n == 1 {
		waitInterrupt()
		return
	}
	if f.modes.set[FakeMarked] && strings.HasPrefix(text, "hang") {
		waitInterrupt()
		return
	}
	if f.modes.set[FakeMarked] && strings.HasPrefix(text, "die") {
		fmt.Fprintln(f.stderr, "fake app-server: dying mid-turn (mode marked)")
		os.Exit(2)
	}
	if f.modes.set[FakeMarked] && strings.HasPrefix(text, "wedge") {
		return // turn/interrupt is answered and ignored: the turn never ends
	}
	if f.modes.set[FakeExitMidTurn] {
		fmt.Fprintln(f.stderr, "fake app-server: dying mid-turn (mode exit-midturn)")
		os.Exit(2)
	}
	if f.modes.set[FakeGarbage] {
		f.writeLine([]byte("this is not JSON {{{"))
	}
	if f.modes.set[FakeHugeLine] {
		f.notify("item/agentMessage/delta", map[string]any{"threadId": th.id, "turnId": t.id, "itemId": "huge-" + t.id,
			"delta": strings.Repeat("x", FakeHugeLineBytes)})
	}
	if f.modes.set[FakeRetryError] {
		f.notify("error", map[string]any{"threadId": th.id, "turnId": t.id, "willRetry": true,
			"error": map[string]any{"message": "Reconnecting... 1/5", "codexErrorInfo": nil, "additionalDetails": nil}})
	}
	switch {
	case f.modes.set[FakeScript]:
		switch f.playScript(t) {
		case scriptComplete:
			text = fmt.Sprintf("reply #%d: %s", n, text)
		case scriptHang:
			waitInterrupt()
			return
		case scriptInterrupted:
			complete("interrupted", nil, []any{})
			return
		default: // scriptEnded: the script's own lines ended the turn, or nothing will
			f.mu.Lock()
			if th.active == t {
				th.active = nil
			}
			f.mu.Unlock()
			return
		}
	case f.modes.set[FakeQuietAfterTool]:
		cmd := map[string]any{"type": "commandExecution", "id": "call-" + t.id, "command": "/bin/bash -lc 'echo tool'",
			"cwd": "/", "status": "inProgress", "aggregatedOutput": nil, "exitCode": nil}
		f.itemStarted(t, cmd)
		cmd["status"], cmd["aggregatedOutput"], cmd["exitCode"] = "completed", "tool\n", 0
		f.itemCompleted(t, cmd)
		waitInterrupt()
		return
	case f.modes.set[FakeNoComplete], f.modes.set[FakeIgnoreInterrupt], f.modes.set[FakeLateStart]:
		waitInterrupt() // ignore-interrupt: never signalled
		return
	case f.modes.set[FakeFail], f.modes.set[FakeAuthFail]:
		msg, info := FakeFailMessage, "internalServerError"
		if f.modes.set[FakeAuthFail] {
			msg, info = FakeAuthFailMessage, "unauthorized"
			fmt.Fprintln(f.stderr, "ERROR codex_core::auth: failed to refresh token: invalid_grant")
		}
		e := map[string]any{"message": msg, "codexErrorInfo": info, "additionalDetails": nil}
		f.notify("error", map[string]any{"threadId": th.id, "turnId": t.id, "willRetry": false, "error": e})
		complete("failed", e, []any{})
		return
	case f.modes.set[FakeApproval]:
		decision, ok := f.approve(t)
		if !ok {
			complete("interrupted", nil, []any{})
			return
		}
		if decision == "cancel" {
			complete("interrupted", nil, []any{})
			return
		}
		text = "decision: " + decision
	default:
		text = fmt.Sprintf("reply #%d: %s", n, text)
	}
	msg := map[string]any{"type": "agentMessage", "id": "msg-" + t.id, "text": "", "phase": "final_answer"}
	f.itemStarted(t, msg)
	f.notify("item/agentMessage/delta", map[string]any{"threadId": th.id, "turnId": t.id, "itemId": "msg-" + t.id, "delta": text})
	msg["text"] = text
	f.itemCompleted(t, msg)
	usage := map[string]any{"totalTokens": 2, "inputTokens": 1, "cachedInputTokens": 0, "outputTokens": 1, "reasoningOutputTokens": 0}
	f.notify("thread/tokenUsage/updated", map[string]any{"threadId": th.id, "turnId": t.id,
		"tokenUsage": map[string]any{"total": usage, "last": usage, "modelContextWindow": 258400}})
	complete("completed", nil, []any{msg})
}

// awaitAnswer waits for the next answer to the request with raw id; false means t was
// interrupted first.
func (f *fakeServer) awaitAnswer(id string, t *fakeTurn) bool {
	f.mu.Lock()
	f.awaits[id]++
	need := f.awaits[id]
	for f.answers[id] < need {
		ch := f.answerCh
		f.mu.Unlock()
		select {
		case <-ch:
		case <-t.interrupted:
			return false
		}
		f.mu.Lock()
	}
	f.mu.Unlock()
	return true
}

// approve runs a command approval round trip; ok is false when the turn was interrupted first.
func (f *fakeServer) approve(t *fakeTurn) (decision string, ok bool) {
	th := t.thread
	command := "/bin/bash -lc 'echo shell-ran'"
	cmd := map[string]any{"type": "commandExecution", "id": "call-" + t.id, "command": command, "cwd": "/",
		"status": "inProgress", "aggregatedOutput": nil, "exitCode": nil}
	f.itemStarted(t, cmd)
	var offer []any
	if f.modes.offer != nil {
		for _, d := range f.modes.offer {
			offer = append(offer, d)
		}
	} else {
		offer = []any{"accept", map[string]any{"acceptWithExecpolicyAmendment": map[string]any{
			"execpolicy_amendment": []string{"/bin/bash", "-lc", "echo shell-ran"}}}, "cancel"}
	}
	id, answer := f.serverRequest("item/commandExecution/requestApproval", map[string]any{
		"kind": "command", "threadId": th.id, "turnId": t.id, "itemId": "call-" + t.id,
		"command": command, "cwd": "/", "availableDecisions": offer,
	})
	var resp fakeMsg
	select {
	case resp = <-answer:
	case <-t.interrupted:
		return "", false
	}
	switch {
	case resp.Error != nil:
		decision = fmt.Sprintf("error %d", resp.Error.Code)
	default:
		var r struct {
			Decision json.RawMessage `json:"decision"`
		}
		_ = json.Unmarshal(resp.Result, &r)
		if err := json.Unmarshal(r.Decision, &decision); err != nil {
			decision = string(r.Decision)
		}
	}
	f.notify("serverRequest/resolved", map[string]any{"threadId": th.id, "requestId": id})
	if decision == "accept" || decision == "acceptForSession" {
		cmd["status"], cmd["aggregatedOutput"], cmd["exitCode"] = "completed", "shell-ran\n", 0
	} else {
		cmd["status"] = "declined"
	}
	f.itemCompleted(t, cmd)
	return decision, true
}

// serverRequest sends a request to the client; ids count from 0, like codex's.
func (f *fakeServer) serverRequest(method string, params any) (int64, <-chan fakeMsg) {
	ch := make(chan fakeMsg, 1)
	f.mu.Lock()
	id := f.nextReqID
	f.nextReqID++
	f.waiting[id] = ch
	f.mu.Unlock()
	f.send(map[string]any{"id": id, "method": method, "params": params})
	return id, ch
}

func (f *fakeServer) itemStarted(t *fakeTurn, item map[string]any) {
	f.notify("item/started", map[string]any{"threadId": t.thread.id, "turnId": t.id, "item": item})
}

func (f *fakeServer) itemCompleted(t *fakeTurn, item map[string]any) {
	f.notify("item/completed", map[string]any{"threadId": t.thread.id, "turnId": t.id, "item": item})
}

func (f *fakeServer) reply(id *json.RawMessage, result any) {
	f.send(map[string]any{"id": id, "result": result})
}

func (f *fakeServer) replyError(id *json.RawMessage, code int, msg string) {
	f.send(map[string]any{"id": id, "error": fakeRPCError{Code: code, Message: msg}})
}

func (f *fakeServer) notify(method string, params any) {
	f.send(map[string]any{"method": method, "params": params, "emittedAtMs": time.Now().UnixMilli()})
}

func (f *fakeServer) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only our own maps are marshalled
	}
	f.writeLine(b)
}

func (f *fakeServer) writeLine(b []byte) {
	f.outMu.Lock()
	defer f.outMu.Unlock()
	if _, err := f.out.Write(append(b, '\n')); err != nil {
		if errors.Is(err, syscall.EPIPE) || errors.Is(err, os.ErrClosed) {
			os.Exit(0) // the client is gone
		}
		fmt.Fprintf(f.stderr, "fake app-server: write: %v\n", err)
	}
}
