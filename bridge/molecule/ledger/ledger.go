package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/atomicfile"
	"github.com/molecule-ai/codex-warm/internal/idring"
)

// StateFileName is the ledger's state file inside its directory: the inbox position, the
// replies not yet accepted, the waits. Tools that read a daemon's state (the soak, the e2e tests)
// name it through package molecule, which re-exports it.
const StateFileName = "bridge-state.json"

// stateVersion is the format version of bridge-state.json.
const stateVersion = 1

// stateFile is bridge-state.json. Only what must survive a crash is in it; messages in flight
// are not, because the platform sends them again (they are after Cursor).
type stateFile struct {
	Version     int    `json:"version"`
	WorkspaceID string `json:"workspace_id"`
	// Cursor is the low-water mark: the last activity id such that it and every row the inbox
	// received before it are finished (answered and delivered, skipped, or poison). The next run
	// polls since_id=Cursor.
	Cursor string `json:"cursor"`
	// AckedSeq is the highest platform mailbox seq at or before Cursor.
	AckedSeq int64 `json:"acked_seq,omitempty"`
	// Done lists recently finished activity ids, oldest first: those after Cursor (finished out
	// of order) and a bounded number at or before it, so rows sent again are not answered twice.
	Done []string `json:"done"`
	// Pending are replies codex produced that the platform has not accepted yet. They are
	// delivered without running codex again, also after a restart.
	Pending []Reply `json:"pending"`
	// Waits are the unanswered messages that wait (Wait): for what, and what their chats were
	// told, so that a restart or a reload does not tell them again.
	Waits []Wait `json:"waits,omitempty"`
	// Parked is what files of older versions hold instead: the ids whose chats were told of
	// the usage limit. It is read, never written.
	Parked  []string  `json:"parked,omitempty"`
	SavedAt time.Time `json:"saved_at"`
}

// Reply is a reply waiting for delivery: stored before its first attempt, so that neither a
// failed delivery nor a crash makes codex answer the message again. It is part of the state
// file: field names and tags never change.
type Reply struct {
	ActivityID string `json:"activity_id"`
	ChatKey    string `json:"chat_key"`
	Route      Route  `json:"route"`
	Text       string `json:"text"`
	// MessageID is the A2A messageId, the same on every attempt so a peer can drop duplicates:
	// platform.ReplyID of the activity. Files written by older versions hold a random UUID, which is kept.
	MessageID  string    `json:"message_id"`
	AnsweredAt time.Time `json:"answered_at"`
	// InReplyTo is the messageId of the peer's message the reply answers, sent with an A2A reply;
	// empty when the message had none.
	InReplyTo string `json:"in_reply_to,omitempty"`
	// Files are the files the agent sent with the reply; each gets its URI once uploaded,
	// stored before the notify that names it.
	Files []SentFile `json:"files,omitempty"`
}

// Route is the destination of a reply, stored with it so a reply delivered after a restart
// goes where the message came from.
type Route struct {
	// Kind is how the reply travels: "notify" (the canvas user of a workspace) or "a2a" (a peer
	// agent); the inbox gives the kinds their meaning.
	Kind      string `json:"kind"`
	Workspace string `json:"workspace"`
}

// SentFile is a file the agent sent with a reply: the daemon's copy and, once uploaded, the
// platform's URI for it. It is stored with the reply so that a restart neither loses the file
// nor uploads it twice.
type SentFile struct {
	Name     string `json:"name"`
	MimeType string `json:"mime_type"`
	Size     int64  `json:"size"`
	Caption  string `json:"caption,omitempty"`
	// Path is the copy under the outbox.
	Path string `json:"path"`
	// URI is what chat/uploads answered for it (canvas replies); stored before the notify.
	URI string `json:"uri,omitempty"`
}

// WaitReason is why a message cannot be answered now. The names are stored (Wait) and end the
// message ids of the notices the inbox sends: never rename one.
type WaitReason string

// ReasonUsageLimit is the account's usage limit. The ledger names it itself because state files
// of older versions list the ids told of it apart ("parked"), and it reads them as waits for it.
const ReasonUsageLimit WaitReason = "usage-limit"

// Wait is what the ledger keeps of a message that waits: the reason, the reason's own earliest
// next try, and the reasons its chat was told of, so that neither a restart nor a reload tells
// it twice.
type Wait struct {
	ActivityID string       `json:"activity_id"`
	Reason     WaitReason   `json:"reason"`
	Until      time.Time    `json:"until,omitzero"`
	Told       []WaitReason `json:"told,omitempty"`
}

// Admission is what the ledger says about a row the poll loop received, so the loop knows
// whether to answer it, skip it, or let its stored reply be delivered.
type Admission int

const (
	AdmitNew       Admission = iota // first sighting: answer it
	AdmitDuplicate                  // in flight or finished already
	AdmitRecovered                  // its reply is pending from an earlier run and being delivered
)

// entry is a row received in this run and not yet behind the cursor, in arrival order.
type entry struct {
	id   string
	seq  int64
	done bool
}

// Ledger tracks which received rows are finished and persists the inbox position, so that a
// restart neither loses a row nor answers one twice. Arrival order (not id order: Molecule ids
// are opaque strings) decides the low-water mark. Its methods are safe for concurrent use.
type Ledger struct {
	path string
	ws   string
	log  *zap.Logger

	// writeMu serializes file writes; it is held during I/O, mu is not.
	writeMu sync.Mutex

	mu       sync.Mutex
	cursor   string
	ackedSeq int64
	order    []*entry
	byID     map[string]*entry
	pending  map[string]Reply
	waits    map[string]Wait // see stateFile.Waits
	recent   *idring.Ring
	restored []Reply
	// donePath is DoneLogFileName. newDone are the ids added to recent since the last sync, to
	// be appended there before the state file is written; doneLines counts its lines.
	donePath  string
	newDone   []string
	doneLines int
	// doneInState makes the state file list every remembered id, as before the done log: while
	// the done log could not be written at start, it does not hold the ids an older state file
	// listed.
	doneInState bool
	// gen counts changes to persisted state; written is the gen of the last successful write.
	gen, written uint64
	// room is closed (and replaced) whenever entries leave order, waking a poll loop that waits
	// for the unacked window to shrink.
	room chan struct{}
}

// Config says where a ledger keeps its state and for which workspace.
type Config struct {
	// Dir holds StateFileName and DoneLogFileName; Open creates it when needed.
	Dir string
	// WorkspaceID is the workspace the state belongs to: a state file of another workspace is
	// moved aside, because its position means nothing in this one's feed.
	WorkspaceID string
	// RecentIDs is how many finished activity ids are remembered for de-duplication.
	RecentIDs int
	// Log hears of state files moved aside and done logs that could not be rewritten; nil
	// discards them.
	Log *zap.Logger
}

// Open loads Dir/bridge-state.json, creating Dir when needed. A file that cannot be parsed, has
// an unknown version or belongs to another workspace is moved aside (never overwritten
// silently) and the ledger starts empty: the next poll then falls back to since_secs.
func Open(cfg Config) (*Ledger, error) {
	dir, workspaceID, log := cfg.Dir, cfg.WorkspaceID, cfg.Log
	if log == nil {
		log = zap.NewNop()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create state directory %s: %w", dir, err)
	}
	l := &Ledger{
		path:    filepath.Join(dir, StateFileName),
		ws:      workspaceID,
		log:     log,
		byID:    make(map[string]*entry),
		pending: make(map[string]Reply),
		waits:   make(map[string]Wait),
		recent:  idring.New(cfg.RecentIDs),
		room:    make(chan struct{}),

		donePath: filepath.Join(dir, DoneLogFileName),
	}
	// Never through a symbolic link: a planted state would move the inbox position, and the
	// next write would replace the link (atomicfile refuses both).
	b, err := atomicfile.ReadFile(l.path)
	if errors.Is(err, os.ErrNotExist) {
		if err := l.openDoneLog(false); err != nil {
			return nil, err
		}
		l.compactAtOpen()
		return l, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read state file: %w", err)
	}
	var st stateFile
	reason := ""
	switch err := json.Unmarshal(b, &st); {
	case err != nil:
		reason = "corrupt: " + err.Error()
	case st.Version != stateVersion:
		reason = fmt.Sprintf("unknown version %d", st.Version)
	case st.WorkspaceID != workspaceID:
		reason = fmt.Sprintf("belongs to workspace %q", st.WorkspaceID)
	}
	if reason != "" {
		aside := fmt.Sprintf("%s.corrupt-%s", l.path, time.Now().UTC().Format("20060102T150405.000000000Z"))
		if err := os.Rename(l.path, aside); err != nil {
			return nil, fmt.Errorf("state file %s is unusable (%s) and cannot be moved aside: %w", l.path, reason, err)
		}
		log.Error("state file unusable; moved aside, starting without an inbox position (rows of the last poll window may be answered again)",
			zap.String("path", l.path), zap.String("moved_to", aside), zap.String("reason", reason))
		return l, l.openDoneLog(true)
	}
	if err := l.openDoneLog(false); err != nil {
		return nil, err
	}
	l.cursor, l.ackedSeq = st.Cursor, st.AckedSeq
	for _, id := range st.Done {
		l.recent.Add(id)
	}
	for _, id := range st.Parked {
		if !l.recent.Has(id) {
			l.waits[id] = Wait{ActivityID: id, Reason: ReasonUsageLimit, Told: []WaitReason{ReasonUsageLimit}}
		}
	}
	for _, w := range st.Waits {
		if w.ActivityID != "" && !l.recent.Has(w.ActivityID) {
			l.waits[w.ActivityID] = w
		}
	}
	for _, p := range st.Pending {
		if p.ActivityID == "" || l.recent.Has(p.ActivityID) {
			continue
		}
		if _, dup := l.pending[p.ActivityID]; dup {
			continue
		}
		l.pending[p.ActivityID] = p
		l.restored = append(l.restored, p)
	}
	l.compactAtOpen()
	return l, nil
}

// compactAtOpen rewrites the done log with every id known at start: the ids an older state file
// listed, and none after a line cut short. Until that succeeds the state file keeps listing them.
func (l *Ledger) compactAtOpen() {
	if err := l.compactDoneLog(); err != nil {
		l.doneInState = true
		l.log.Warn("could not rewrite the done log; the state file keeps the finished ids", zap.String("path", l.donePath), zap.Error(err))
	}
}

// openDoneLog reads the done log into recent. With aside, the state file was moved aside and
// the done log goes with it (it belongs to that state).
func (l *Ledger) openDoneLog(aside bool) error {
	if aside {
		if err := os.Rename(l.donePath, l.donePath+".aside"); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("move %s aside with the state file: %w", l.donePath, err)
		}
		return nil
	}
	ids, cut, err := readDoneLog(l.donePath)
	if err != nil {
		return fmt.Errorf("read %s: %w", l.donePath, err)
	}
	if cut {
		l.log.Warn("the done log's last line was cut short (a kill during a write); it is dropped", zap.String("path", l.donePath))
	}
	for _, id := range ids {
		l.recent.Add(id)
	}
	l.doneLines = len(ids)
	return nil
}

// compactDoneLog rewrites the done log with the ids remembered now.
func (l *Ledger) compactDoneLog() error {
	l.mu.Lock()
	ids := l.recent.List()
	l.mu.Unlock()
	if err := rewriteDoneLog(l.donePath, ids); err != nil {
		return err
	}
	l.doneLines = len(ids)
	l.doneInState = false
	return nil
}

// TakeRestored returns the pending replies loaded from disk, once: the inbox delivers them at
// start without running codex again.
func (l *Ledger) TakeRestored() []Reply {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.restored
	l.restored = nil
	return r
}

// PendingFiles are the paths of the copies the pending replies list: what the outbox must keep.
func (l *Ledger) PendingFiles() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var paths []string
	for _, p := range l.pending {
		for _, f := range p.Files {
			paths = append(paths, f.Path)
		}
	}
	return paths
}

// Cursor is the durable inbox position (low-water mark): the poll asks for the rows after it.
func (l *Ledger) Cursor() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cursor
}

// AckedSeq is the highest mailbox seq behind the cursor: what the inbox acknowledges to the
// platform.
func (l *Ledger) AckedSeq() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ackedSeq
}

// Counts returns the rows not yet behind the cursor and the replies pending delivery, for the
// inbox's back-pressure and stats.
func (l *Ledger) Counts() (unacked, pending int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.order), len(l.pending)
}

// Admit records a received row that is to be answered and says whether it is new, so that a
// row the platform sends again is answered once.
func (l *Ledger) Admit(id string, seq int64) Admission {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byID[id] != nil {
		return AdmitDuplicate
	}
	if _, ok := l.pending[id]; ok {
		l.appendLocked(&entry{id: id, seq: seq})
		return AdmitRecovered
	}
	if l.recent.Has(id) {
		// Finished in an earlier run (or before a cursor reset). Track it as finished so the
		// cursor can move past it.
		l.appendLocked(&entry{id: id, seq: seq, done: true})
		l.advanceLocked()
		return AdmitDuplicate
	}
	l.appendLocked(&entry{id: id, seq: seq})
	return AdmitNew
}

// AdmitDone records a row that is finished on arrival (an echo or poison). It reports false when
// the row was known already.
func (l *Ledger) AdmitDone(id string, seq int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byID[id] != nil {
		return false
	}
	known := l.recent.Has(id)
	l.appendLocked(&entry{id: id, seq: seq, done: true})
	l.advanceLocked()
	return !known
}

// SetPending stores a reply before its first delivery attempt (and again as its files are
// uploaded); Sync makes it durable, after which a crash no longer costs a second turn.
func (l *Ledger) SetPending(p Reply) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending[p.ActivityID] = p
	l.gen++
}

// WaitOf is what the ledger holds of id's wait (zero when none).
func (l *Ledger) WaitOf(id string) Wait {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.waits[id]
}

// SetWait records a waiting message, until it is done (MarkDone), so a restart knows what its
// chat was told.
func (l *Ledger) SetWait(w Wait) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w.Told = slices.Clone(w.Told)
	l.waits[w.ActivityID] = w
	l.gen++
}

// MarkDone finishes a row, so the cursor can move past it: its reply was accepted, judged undeliverable, or it needs none.
func (l *Ledger) MarkDone(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.pending, id)
	delete(l.waits, id)
	l.gen++
	if e := l.byID[id]; e != nil {
		e.done = true
		l.advanceLocked()
		return
	}
	// A recovered reply whose row has not come again: remember it so the row is skipped if it does.
	l.rememberLocked(id)
}

// rememberLocked adds a finished id to recent and, when it is new there, to the next append to
// the done log.
func (l *Ledger) rememberLocked(id string) {
	if l.recent.Has(id) {
		return
	}
	l.recent.Add(id)
	l.newDone = append(l.newDone, id)
}

func (l *Ledger) appendLocked(e *entry) {
	l.order = append(l.order, e)
	l.byID[e.id] = e
	if e.done {
		l.gen++
	}
}

// advanceLocked moves the cursor over the finished prefix of the arrival order.
func (l *Ledger) advanceLocked() {
	n := 0
	for n < len(l.order) && l.order[n].done {
		e := l.order[n]
		l.rememberLocked(e.id)
		delete(l.byID, e.id)
		l.cursor = e.id
		l.ackedSeq = max(l.ackedSeq, e.seq)
		n++
	}
	if n == 0 {
		return
	}
	l.gen++
	// Copy instead of reslicing so the backing array does not grow without bound.
	l.order = append(l.order[:0:0], l.order[n:]...)
	close(l.room)
	l.room = make(chan struct{})
}

// WaitRoom blocks until fewer than limit rows are unacked or ctx is done: the poll loop's
// back-pressure, which bounds what a restart has to receive again.
func (l *Ledger) WaitRoom(ctx context.Context, limit int) error {
	for {
		l.mu.Lock()
		if len(l.order) < limit {
			l.mu.Unlock()
			return nil
		}
		ch := l.room
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// Head returns the oldest unfinished row, for logs about a stalled cursor.
func (l *Ledger) Head() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.order {
		if !e.done {
			return e.id
		}
	}
	return ""
}

// snapshotLocked builds the file content.
func (l *Ledger) snapshotLocked() stateFile {
	st := stateFile{
		Version:     stateVersion,
		WorkspaceID: l.ws,
		Cursor:      l.cursor,
		AckedSeq:    l.ackedSeq,
		Done:        []string{},
		Pending:     make([]Reply, 0, len(l.pending)),
		SavedAt:     time.Now().UTC(),
	}
	if l.doneInState {
		st.Done = l.recent.List()
	}
	for _, e := range l.order {
		if e.done && !l.recent.Has(e.id) {
			st.Done = append(st.Done, e.id)
		}
	}
	for _, p := range l.pending {
		st.Pending = append(st.Pending, p)
	}
	slices.SortFunc(st.Pending, func(a, b Reply) int { return a.AnsweredAt.Compare(b.AnsweredAt) })
	for _, w := range l.waits {
		st.Waits = append(st.Waits, w)
	}
	slices.SortFunc(st.Waits, func(a, b Wait) int { return strings.Compare(a.ActivityID, b.ActivityID) })
	return st
}

// Sync makes every change made before the call durable. Concurrent callers share writes (group
// commit): a caller that waited for the writer finds its change already written.
func (l *Ledger) Sync() error {
	l.mu.Lock()
	target := l.gen
	done := l.written >= target
	l.mu.Unlock()
	if done {
		return nil
	}
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	l.mu.Lock()
	if l.written >= target {
		l.mu.Unlock()
		return nil
	}
	gen := l.gen
	st := l.snapshotLocked()
	fresh := l.newDone
	l.newDone = nil
	doneBound := 2*l.recent.Cap() + 64 // the ring grows under l.mu: read its size here
	l.mu.Unlock()
	// The ids first: the state file about to be written may move the cursor past them.
	if len(fresh) > 0 {
		if err := appendDoneLog(l.donePath, fresh); err != nil {
			l.mu.Lock()
			l.newDone = append(fresh, l.newDone...)
			l.mu.Unlock()
			return fmt.Errorf("write state: %w", err)
		}
		l.doneLines += len(fresh)
	}
	b, err := json.MarshalIndent(st, "", " ")
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	if err := atomicfile.WriteFile(l.path, append(b, '\n'), atomicfile.Options{}); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	l.mu.Lock()
	l.written = max(l.written, gen)
	l.mu.Unlock()
	if l.doneInState || l.doneLines > doneBound {
		if err := l.compactDoneLog(); err != nil {
			// Not fatal: the ids are in the log (only longer) or, with doneInState, in the state file.
			l.log.Warn("could not rewrite the done log", zap.String("path", l.donePath), zap.Error(err))
		}
	}
	return nil
}
