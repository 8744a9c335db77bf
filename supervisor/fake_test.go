package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/appserver/appservertest"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// fakeWorld is an in-memory codex for unit tests: it spawns fakeChilds and keeps each thread's
// history across children, as codex's rollout files do. Turn behaviour is chosen by the message
// text (see fakeChild.RunTurn). Every wait is on a channel or timer, so tests run inside a
// testing/synctest bubble with faked time.
type fakeWorld struct {
	mu          sync.Mutex
	spawns      int
	nextThread  int
	threads     map[string][]string // thread id → user texts, oldest first
	archivedTh  map[string][]string // threads archived (retention_test.go), out of threads
	lastStatus  map[string]string   // thread id → status of its last turn; absent: completed
	lastTurns   int                 // LastTurn calls
	reverts     []string            // "thread/turn" of each RevertThread that dropped a turn
	lastTurnErr error               // returned by LastTurn when set
	revertErr   error               // returned by RevertThread when set
	children    []*fakeChild
	resumes     []string // thread ids given to ResumeThread, in call order
	turnLog     []string // "key:text" at each turn start, in order
	imageLog    []string // the image inputs of every turn, in order
	steerLog    []string // "key:text" of each text steered into a running turn
	inFlight    map[string]int
	maxInKey    map[string]int
	total       int
	maxTotal    int
	alive       int
	maxAlive    int
	gates       map[string]chan struct{}
	barrierN    int
	arrived     int
	barrier     chan struct{}

	// spawnHook, when set, runs first in each spawn (n counts spawns from 1). An error fails the
	// spawn; deadChild makes the spawned child exit at once.
	spawnHook func(ctx context.Context, key string, n int) (deadChild bool, err error)
	// steerHook, when set, runs first in each SteerTurn, without the child's lock.
	steerHook func()
}

func newFakeWorld() *fakeWorld {
	return &fakeWorld{
		threads:    make(map[string][]string),
		lastStatus: make(map[string]string),
		inFlight:   make(map[string]int),
		maxInKey:   make(map[string]int),
		gates:      make(map[string]chan struct{}),
		barrier:    make(chan struct{}),
	}
}

func (w *fakeWorld) spawn(ctx context.Context, key string) (Child, error) {
	w.mu.Lock()
	w.spawns++
	n := w.spawns
	hook := w.spawnHook
	w.mu.Unlock()
	dead := false
	if hook != nil {
		var err error
		if dead, err = hook(ctx, key, n); err != nil {
			return nil, err
		}
	}
	c := &fakeChild{w: w, key: key, pid: 10_000_000 + n, done: make(chan struct{}), last: time.Now()}
	w.mu.Lock()
	w.children = append(w.children, c)
	w.alive++
	w.maxAlive = max(w.maxAlive, w.alive)
	w.mu.Unlock()
	if dead {
		c.exit(errors.New("fake child died at start"))
	}
	return c, nil
}

// gate returns the named gate; turns with text "block:<name>" wait for it to close.
func (w *fakeWorld) gate(name string) chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	g := w.gates[name]
	if g == nil {
		g = make(chan struct{})
		w.gates[name] = g
	}
	return g
}

func (w *fakeWorld) open(name string) { close(w.gate(name)) }

func (w *fakeWorld) child(i int) *fakeChild {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.children[i]
}

func (w *fakeWorld) spawnCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.spawns
}

func (w *fakeWorld) resumed() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.resumes...)
}

// history returns the LastTurn calls so far and the reverts made.
func (w *fakeWorld) history() (lastTurns int, reverts []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastTurns, append([]string(nil), w.reverts...)
}

func (w *fakeWorld) turns() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.turnLog...)
}

type fakeChild struct {
	w    *fakeWorld
	key  string
	pid  int
	done chan struct{}

	mu     sync.Mutex
	err    error
	closes int
	last   time.Time
	once   sync.Once
	active *fakeTurn // the running turn, nil between turns
}

// fakeTurn is a fakeChild's running turn, as SteerTurn sees it.
type fakeTurn struct {
	threadID, id string
	steerable    bool
	steered      []string // texts SteerTurn added
}

// SteerTurn adds the text to the running turn, whose reply then names it; like codex it refuses
// a turn that is not the running one, and a turn whose text holds "nosteer" (codex's activeTurnNotSteerable).
func (c *fakeChild) SteerTurn(ctx context.Context, threadID, expectedTurnID string, input []protocol.UserInput) error {
	c.w.mu.Lock()
	hook := c.w.steerHook
	c.w.mu.Unlock()
	if hook != nil {
		hook()
	}
	if c.isDead() {
		return c.exited()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.active
	switch {
	case t == nil || t.threadID != threadID || t.id != expectedTurnID:
		return fmt.Errorf("turn/steer: -32600 expected active turn id %s: %w", expectedTurnID, appserver.ErrNotSteerable)
	case !t.steerable:
		return fmt.Errorf("turn/steer: activeTurnNotSteerable: %w", appserver.ErrNotSteerable)
	}
	t.steered = append(t.steered, input[0].Text)
	c.w.mu.Lock()
	c.w.steerLog = append(c.w.steerLog, c.key+":"+input[0].Text)
	c.w.mu.Unlock()
	return nil
}

func (c *fakeChild) exit(err error) {
	c.once.Do(func() {
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
		c.w.mu.Lock()
		c.w.alive--
		c.w.mu.Unlock()
		close(c.done)
	})
}

func (c *fakeChild) isDead() bool { return isDone(c) }

func (c *fakeChild) closeCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closes
}

func (c *fakeChild) PID() int                { return c.pid }
func (c *fakeChild) Done() <-chan struct{}   { return c.done }
func (c *fakeChild) LastActivity() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.last }

func (c *fakeChild) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *fakeChild) Close() error {
	c.mu.Lock()
	c.closes++
	c.mu.Unlock()
	c.exit(errors.New("closed"))
	return nil
}

func (c *fakeChild) exited() error {
	return &appserver.ExitError{PID: c.pid, Status: "signal: killed", Code: -1, Reason: c.Err()}
}

func (c *fakeChild) StartThread(ctx context.Context, opts appserver.ThreadOptions) (string, error) {
	if c.isDead() {
		return "", c.exited()
	}
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	c.w.nextThread++
	id := fmt.Sprintf("thread-%d", c.w.nextThread)
	c.w.threads[id] = nil
	return id, nil
}

func (c *fakeChild) ResumeThread(ctx context.Context, threadID string, opts appserver.ThreadOptions) error {
	if c.isDead() {
		return c.exited()
	}
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	c.w.resumes = append(c.w.resumes, threadID)
	if _, ok := c.w.threads[threadID]; !ok {
		return fmt.Errorf("resume %s: -32600 no rollout found: %w", threadID, appserver.ErrThreadNotFound)
	}
	return nil
}

// LastTurn reports the thread's last turn as codex would after a resume: a turn that never
// settled (its child died, or it failed before turn/completed) reads as interrupted.
func (c *fakeChild) LastTurn(ctx context.Context, threadID string) (appserver.StoredTurn, bool, error) {
	if c.isDead() {
		return appserver.StoredTurn{}, false, c.exited()
	}
	w := c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lastTurns++
	if w.lastTurnErr != nil {
		return appserver.StoredTurn{}, false, w.lastTurnErr
	}
	texts := w.threads[threadID]
	if len(texts) == 0 {
		return appserver.StoredTurn{}, false, nil
	}
	status := w.lastStatus[threadID]
	if status == "" {
		status = protocol.TurnCompleted
	}
	return appserver.StoredTurn{ID: fmt.Sprintf("turn-%d", len(texts)), Status: status, UserTexts: texts[len(texts)-1:]}, true, nil
}

// RevertThread drops the thread's last turn; it knows no other.
func (c *fakeChild) RevertThread(ctx context.Context, threadID, beforeTurnID string) error {
	if c.isDead() {
		return c.exited()
	}
	w := c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.revertErr != nil {
		return w.revertErr
	}
	texts := w.threads[threadID]
	if len(texts) == 0 || beforeTurnID != fmt.Sprintf("turn-%d", len(texts)) {
		return fmt.Errorf("revert %s: -32600 turn not found: %s", threadID, beforeTurnID)
	}
	w.threads[threadID] = texts[:len(texts)-1]
	delete(w.lastStatus, threadID)
	w.reverts = append(w.reverts, threadID+"/"+beforeTurnID)
	return nil
}

// RunTurn acts on the text:
//
//	block:<gate>  complete after the gate opens (a text holding "nosteer" refuses SteerTurn)
//	latestart:<g> answer turn/start (OnStarted) once gate g opens, then act as block:<g>-end
//	barrier       complete once fakeWorld.barrierN turns are in flight at the same time
//	hang          never complete; honour the interrupt
//	wedge         never complete; ignore the interrupt (ErrWedged after the grace)
//	tool-quiet    complete a commandExecution item, then go silent; honour the interrupt
//	die           exit mid-turn
//	fail          settle with status failed
//	rpc-error     fail before turn/completed
//	protocol-error  the child answered turn/start with something unreadable (appserver.ErrProtocol)
//	ask...        ask for an approval (see fakeChild.askTurn)
//	progress:<g>  think, then run `npm test` until gate g opens, then write the reply
//	anything else complete with "reply #<n>: <text>", n counting the thread's turns
func (c *fakeChild) RunTurn(ctx context.Context, threadID string, input []protocol.UserInput, opts appserver.TurnOptions) (res *appserver.TurnResult, err error) {
	text := input[0].Text
	w := c.w
	if c.isDead() {
		return nil, c.exited()
	}
	w.mu.Lock()
	w.turnLog = append(w.turnLog, c.key+":"+text)
	for _, in := range input[1:] {
		w.imageLog = append(w.imageLog, in.URL)
	}
	w.threads[threadID] = append(w.threads[threadID], text)
	n := len(w.threads[threadID])
	w.inFlight[c.key]++
	w.maxInKey[c.key] = max(w.maxInKey[c.key], w.inFlight[c.key])
	w.total++
	w.maxTotal = max(w.maxTotal, w.total)
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.inFlight[c.key]--
		w.total--
		w.lastStatus[threadID] = protocol.TurnInterrupted
		if res != nil && res.Status != "" {
			w.lastStatus[threadID] = res.Status
		}
		w.mu.Unlock()
	}()
	turnID := fmt.Sprintf("turn-%d", n)
	ft := &fakeTurn{threadID: threadID, id: turnID, steerable: !strings.Contains(text, "nosteer")}
	c.mu.Lock()
	c.active = ft
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.active = nil
		c.mu.Unlock()
	}()
	if g, ok := strings.CutPrefix(text, "latestart:"); ok {
		// codex answers turn/start only after gate g opens; the turn then waits for g+"-end".
		select {
		case <-w.gate(g):
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		text = "block:" + g + "-end"
	}
	if opts.OnStarted != nil {
		opts.OnStarted(turnID)
	}
	result := func(status string) *appserver.TurnResult {
		reply := ""
		if status == protocol.TurnCompleted {
			c.mu.Lock()
			all := append([]string{input[0].Text}, ft.steered...)
			c.mu.Unlock()
			reply = fmt.Sprintf("reply #%d: %s", n, strings.Join(all, " + "))
		}
		return &appserver.TurnResult{ThreadID: threadID, TurnID: turnID, Status: status,
			Notifications: appservertest.TurnNotifications(threadID, turnID, status, reply)}
	}
	interrupted := func() (*appserver.TurnResult, error) {
		return result(protocol.TurnInterrupted), fmt.Errorf("turn %s interrupted: %w", turnID, context.Cause(ctx))
	}
	waitCtx := func() (*appserver.TurnResult, error) {
		select {
		case <-ctx.Done():
			return interrupted()
		case <-c.done:
			return nil, c.exited()
		}
	}
	c.mu.Lock()
	c.last = time.Now()
	c.mu.Unlock()

	switch {
	case strings.HasPrefix(text, "block:"):
		select {
		case <-w.gate(strings.TrimPrefix(text, "block:")):
		case <-ctx.Done():
			return interrupted()
		case <-c.done:
			return nil, c.exited()
		}
	case text == "barrier":
		w.mu.Lock()
		w.arrived++
		if w.arrived == w.barrierN {
			close(w.barrier)
		}
		w.mu.Unlock()
		select {
		case <-w.barrier:
		case <-ctx.Done():
			return interrupted()
		}
	case text == "hang":
		return waitCtx()
	case text == "wedge":
		select {
		case <-ctx.Done():
		case <-c.done:
			return nil, c.exited()
		}
		grace := opts.InterruptGrace
		if grace == 0 {
			grace = 5 * time.Second
		}
		select {
		case <-time.After(grace):
			return nil, fmt.Errorf("turn %s: no turn/completed %s after turn/interrupt: %w", turnID, grace, appserver.ErrWedged)
		case <-c.done:
			return nil, c.exited()
		}
	case text == "tool-quiet":
		item, _ := json.Marshal(map[string]any{"threadId": threadID, "turnId": turnID,
			"item": map[string]any{"type": protocol.ItemCommandExecution, "id": "call-1", "status": "completed"}})
		opts.OnNotification(protocol.Notification{Method: protocol.NotifyItemStarted, Params: item})
		opts.OnNotification(protocol.Notification{Method: protocol.NotifyItemCompleted, Params: item})
		return waitCtx()
	case text == "die":
		c.exit(errors.New("killed mid-turn"))
		return nil, c.exited()
	case text == "fail":
		r := result(protocol.TurnFailed)
		r.Error = &protocol.TurnError{Message: "model said 500"}
		return r, nil
	case text == "rpc-error":
		return nil, errors.New("turn/start: -32603 internal error")
	case text == "protocol-error":
		return nil, fmt.Errorf("turn/start result has no turn id: %w", appserver.ErrProtocol)
	case strings.HasPrefix(text, "ask"):
		return c.askTurn(ctx, threadID, turnID, text, opts, result)
	case strings.HasPrefix(text, "progress:"):
		notify := func(method, typ string, extra map[string]any) {
			item := map[string]any{"type": typ, "id": typ + "-1"}
			maps.Copy(item, extra)
			b, _ := json.Marshal(map[string]any{"threadId": threadID, "turnId": turnID, "item": item})
			opts.OnNotification(protocol.Notification{Method: method, Params: b})
		}
		notify(protocol.NotifyItemStarted, protocol.ItemReasoning, nil)
		select {
		case <-time.After(10 * time.Second):
		case <-ctx.Done():
			return interrupted()
		}
		notify(protocol.NotifyItemCompleted, protocol.ItemReasoning, nil)
		notify(protocol.NotifyItemStarted, protocol.ItemCommandExecution, map[string]any{"command": "npm test"})
		select {
		case <-w.gate(strings.TrimPrefix(text, "progress:")):
		case <-ctx.Done():
			return interrupted()
		}
		notify(protocol.NotifyItemCompleted, protocol.ItemCommandExecution, map[string]any{"command": "npm test", "status": "completed"})
		notify(protocol.NotifyItemStarted, protocol.ItemAgentMessage, nil)
	}
	return result(protocol.TurnCompleted), nil
}

// testStore is a ThreadStore whose Set can be made to fail.
type testStore struct {
	mu       sync.Mutex
	m        map[string]string
	sets     int
	failSet  error
	archived []string // "key=thread" of each Archive that forgot a thread
}

func newTestStore(kv ...string) *testStore {
	s := &testStore{m: make(map[string]string)}
	for i := 0; i+1 < len(kv); i += 2 {
		s.m[kv[i]] = kv[i+1]
	}
	return s
}

func (s *testStore) Get(key string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[key]
	return v, ok
}

func (s *testStore) Set(key, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sets++
	if s.failSet != nil {
		return s.failSet
	}
	s.m[key] = id
	return nil
}

func (s *testStore) Delete(key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
	return nil
}

func (s *testStore) Archive(key, _ string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.m[key]
	if ok {
		s.archived = append(s.archived, key+"="+id)
		delete(s.m, key)
	}
	return id, nil
}

// dieUnseen makes the child report err from Err() while its Done channel stays open: the
// process is gone, and its watcher has not noticed yet. exit completes the death.
func (c *fakeChild) dieUnseen(err error) {
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
}
