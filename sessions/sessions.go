// Package sessions is the durable map from chat key to codex thread id.
//
// The map lives in the state directory as sessions.json, in the format of the Python daemon this
// project replaces (codex-channel-molecule): one flat JSON object
//
//	{"canvas:<workspace id>": "<codex thread id>", "peer:<peer workspace id>": "..."}
//
// so the file that daemon left behind is read as is and its conversations continue. The file is
// written back in the same flat shape (sorted keys, two-space indent, as Python's
// json.dump(indent=2) would), so a plain json.load / json.Unmarshal into map[string]string reads it.
//
// Writes replace the file atomically (temp file in the same folder, fsync, rename, fsync of the
// folder), so a crash leaves either the old or the new map, never a torn file. A file that cannot
// be read or is not a JSON object is moved aside to sessions.json.corrupt-<UTC time> and reported;
// it is never overwritten or deleted, unlike the Python daemon, which silently replaced it. A
// symbolic link in the file's place is refused, never read through or replaced (see atomicfile).
//
// Concurrent updates coalesce (group commit): every Set is durable when it returns, but Sets that
// arrive while a write is in flight share the next write. There is no background goroutine; the
// caller that finds no write in flight performs it for everyone waiting (leader/follower), so a
// Store needs no Close.
//
// The Store assumes it is the only writer of its file: the daemon holds an exclusive lock on the
// state directory (package daemon), which is also what makes removing stale temp files safe.
package sessions

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/atomicfile"
)

// DefaultFileName is the Python daemon's file name inside its state directory.
const DefaultFileName = "sessions.json"

// asideTimeFormat names moved-aside files: sessions.json.corrupt-20261121T101500Z.
const asideTimeFormat = "20060102T150405Z"

// Config configures Open.
type Config struct {
	// Dir is the state directory. It is created (mode 0700) when missing. Required.
	Dir string
	// Logger receives corruption reports and write failures. Nil means no logging.
	Logger *zap.Logger
	// FileName is the file inside Dir; empty means DefaultFileName. It must be a plain name.
	FileName string
}

// Stats counts the Store's file writes.
type Stats struct {
	// Writes is the number of times the file was replaced successfully. Because concurrent
	// changes coalesce, it is usually far below the number of Set and Delete calls.
	Writes int64
	// FailedWrites is the number of write attempts that returned an error.
	FailedWrites int64
	// Dirty is true when the last write attempt failed, so the file lacks changes that memory
	// holds. The next Set, Delete or Flush writes them.
	Dirty bool
}

// Store is the chat key → thread id map and its file. It is safe for concurrent use.
type Store struct {
	dir, name, path string
	log             *zap.Logger
	seams           seams
	recovered       string // file created at Open to preserve a bad file; empty if none

	mu   sync.Mutex
	cond *sync.Cond // signalled, with mu, whenever a write finishes
	m    map[string]string
	// pending collects changes not yet taken by any write; nil when there are none.
	pending *batch
	// inflight is the batch being written; non-nil exactly while writing is true.
	inflight *batch
	writing  bool
	dirty    bool
	stats    Stats
}

// batch is one group commit: every change made while it was pending, and the shared outcome.
type batch struct {
	done bool
	err  error
}

// seams are the few operations that tests replace to inject faults a root test process cannot
// provoke with file permissions (ENOSPC from write, EIO from fsync), to pin the clock, and to
// observe callers joining a batch. Production uses defaultSeams.
type seams struct {
	write  func(f *os.File, b []byte) (int, error)
	sync   func(f *os.File) error
	now    func() time.Time
	joined func() // called with mu held each time a change joins the pending batch
}

func defaultSeams() seams {
	return seams{
		write:  (*os.File).Write,
		sync:   (*os.File).Sync,
		now:    time.Now,
		joined: func() {},
	}
}

// Open loads the map from Config.Dir/Config.FileName, creating the directory when it is missing.
//
// A missing file is an empty map. An empty file (zero bytes or only white space) is also an
// empty map, logged at Warn: it holds nothing to preserve, and it is what the Python daemon leaves
// when it dies between truncating and writing the file.
//
// A file that cannot be read or is not a JSON object (garbage, truncated JSON, an array, null) is
// moved aside to <file>.corrupt-<UTC time>, logged at Error with both paths, and the store starts
// empty. A JSON object in which some entries are unusable (value not a non-empty string, or empty
// key) keeps its usable entries; the dropped ones are logged at Warn, the original bytes are copied
// aside first, and only then is the cleaned map written over the original. Recovered reports the
// aside path in both cases.
//
// Open returns an error only when it cannot proceed safely: the directory cannot be created, the
// file's path is a symbolic link (an error wrapping atomicfile.ErrSymlink: it is neither read
// through nor moved; later writes refuse it too), the bad file cannot be moved or copied aside,
// or the read failed for a reason that says nothing about the file (out of file descriptors or
// memory).
func Open(cfg Config) (*Store, error) {
	return open(cfg, defaultSeams())
}

func open(cfg Config, sm seams) (*Store, error) {
	if cfg.Dir == "" {
		return nil, errors.New("sessions: config Dir is empty")
	}
	name := cfg.FileName
	if name == "" {
		name = DefaultFileName
	}
	if name == "." || name == ".." || strings.ContainsRune(name, filepath.Separator) || filepath.Base(name) != name {
		return nil, fmt.Errorf("sessions: file name %q is not a plain file name", name)
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	s := &Store{
		dir:   cfg.Dir,
		name:  name,
		path:  filepath.Join(cfg.Dir, name),
		log:   log.Named("sessions"),
		seams: sm,
		m:     map[string]string{},
	}
	s.cond = sync.NewCond(&s.mu)

	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, fmt.Errorf("sessions: create state dir %s: %w", s.dir, err)
	}
	s.removeStaleTemps()
	if err := s.load(); err != nil {
		return nil, err
	}
	return s, nil
}

// load reads the file into s.m, moving or copying a bad file aside as Open documents.
func (s *Store) load() error {
	data, m, dropped, bad, err := readFile(s.path)
	switch {
	case err != nil:
		return err
	case bad != nil:
		return s.moveAside(bad)
	case data == nil:
		return nil
	case len(bytes.TrimSpace(data)) == 0:
		s.log.Warn("sessions file is empty; starting with no sessions (the previous daemon may have lost its entries in an interrupted write)",
			zap.String("path", s.path), zap.Int("bytes", len(data)))
		return nil
	}
	s.m = m
	for _, d := range dropped {
		s.log.Warn("dropping unusable sessions entry",
			zap.String("path", s.path), zap.String("key", d.key), zap.String("value", truncate(d.value, 200)))
	}
	if len(dropped) == 0 {
		s.log.Info("sessions loaded", zap.String("path", s.path), zap.Int("entries", len(s.m)))
		return nil
	}

	// Keep the original bytes before anything replaces them, then write the cleaned map so the
	// next start does not rediscover (and copy aside again) the same bad entries.
	aside, err := s.copyAside(data)
	if err != nil {
		return fmt.Errorf("sessions: %s has %d unusable entries and could not be copied aside: %w", s.path, len(dropped), err)
	}
	s.recovered = aside
	s.log.Error("sessions file had unusable entries; original copied aside, usable entries kept",
		zap.String("path", s.path), zap.String("copied_to", aside),
		zap.Int("kept", len(s.m)), zap.Int("dropped", len(dropped)))
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.commitLocked(s.joinLocked()); err != nil {
		// Not fatal: the original is intact on disk and a copy is aside; memory holds the cleaned
		// map and the next Set or Flush retries the write.
		s.log.Error("rewriting cleaned sessions file failed; will retry on the next change",
			zap.String("path", s.path), zap.Error(err))
	}
	return nil
}

// droppedEntry is an unusable entry of a sessions file.
type droppedEntry struct{ key, value string }

// readFile reads and decodes the sessions file at path without changing anything. data is nil
// when there is no file. bad says why the file must be moved aside (unreadable, not a JSON
// object); err is a failure that says nothing about the file, or a symbolic link, which is
// refused. Otherwise m holds the usable entries and dropped the others.
func readFile(path string) (data []byte, m map[string]string, dropped []droppedEntry, bad, err error) {
	m = map[string]string{}
	// ReadFile neither follows a symbolic link (this store must not read another file as its
	// state, nor replace it later) nor blocks on a FIFO; a directory or device is not ours to
	// read and is moved aside.
	data, err = atomicfile.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, m, nil, nil, nil
	case errors.Is(err, atomicfile.ErrSymlink):
		return nil, nil, nil, nil, fmt.Errorf("sessions: %w", err)
	case errors.Is(err, atomicfile.ErrNotRegular):
		return nil, nil, nil, err, nil
	case err != nil && transientReadError(err):
		return nil, nil, nil, nil, fmt.Errorf("sessions: read %s: %w", path, err)
	case err != nil:
		return nil, nil, nil, fmt.Errorf("unreadable: %w", err), nil
	}
	if data == nil {
		data = []byte{}
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return data, m, nil, nil, nil
	}
	// Unmarshal accepts the literal null as an empty map, so insist on an object explicitly.
	var raw map[string]json.RawMessage
	if trimmed[0] != '{' {
		return data, nil, nil, errors.New("not a JSON object"), nil
	}
	if err := json.Unmarshal(trimmed, &raw); err != nil {
		return data, nil, nil, fmt.Errorf("invalid JSON: %w", err), nil
	}
	for k, v := range raw {
		var id string
		if err := json.Unmarshal(v, &id); err != nil || id == "" || k == "" {
			dropped = append(dropped, droppedEntry{key: k, value: string(v)})
			continue
		}
		m[k] = id
	}
	return data, m, dropped, nil, nil
}

// ErrCorrupt is returned by Check for a file Open would move aside.
var ErrCorrupt = errors.New("sessions file is corrupt")

// CheckReport is what Check found.
type CheckReport struct {
	// Path is the file checked.
	Path string
	// Exists is false when there is no file yet: Open starts with an empty map.
	Exists bool
	// Entries counts the usable chat key → thread id entries.
	Entries int
	// Dropped counts unusable entries: Open copies the file aside and drops them.
	Dropped int
	// Threads are the usable entries: chat key → thread id.
	Threads map[string]string
}

// Check reads dir/DefaultFileName as Open would and reports what Open would find, changing
// nothing: no directory is created and no file moved, copied or rewritten. It fails with an
// error wrapping ErrCorrupt for a file Open would move aside (conversations would start fresh),
// with one wrapping atomicfile.ErrSymlink for a link Open refuses, and with the read error
// otherwise.
func Check(dir string) (CheckReport, error) {
	rep := CheckReport{Path: filepath.Join(dir, DefaultFileName)}
	data, m, dropped, bad, err := readFile(rep.Path)
	switch {
	case err != nil:
		return rep, err
	case bad != nil:
		return rep, fmt.Errorf("sessions: %s: %w: %w", rep.Path, ErrCorrupt, bad)
	}
	rep.Exists, rep.Entries, rep.Dropped, rep.Threads = data != nil, len(m), len(dropped), m
	return rep, nil
}

// transientReadError reports read failures caused by the process, not the file: moving a good
// file aside because we ran out of descriptors would throw away every conversation.
func transientReadError(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOMEM) || errors.Is(err, syscall.EINTR) || errors.Is(err, syscall.EAGAIN)
}

// moveAside renames the bad file to a fresh aside name and starts empty. why explains the problem.
func (s *Store) moveAside(why error) error {
	aside, err := s.placeAside(func(target string) error {
		// Link refuses an existing target, so an earlier aside file is never replaced; it does
		// not work for directories or on some filesystems, where we fall back to a checked rename.
		lerr := os.Link(s.path, target)
		if lerr == nil {
			return os.Remove(s.path)
		}
		if errors.Is(lerr, fs.ErrExist) {
			return lerr
		}
		if _, serr := os.Lstat(target); serr == nil {
			return fs.ErrExist
		}
		return os.Rename(s.path, target)
	})
	if err != nil {
		return fmt.Errorf("sessions: move bad file %s aside (%v): %w", s.path, why, err)
	}
	s.syncDir()
	s.recovered = aside
	s.log.Error("sessions file is corrupt; moved it aside and starting with no sessions",
		zap.String("path", s.path), zap.String("moved_to", aside), zap.NamedError("reason", why))
	return nil
}

// copyAside writes data to a fresh aside file, durably, leaving the original in place.
func (s *Store) copyAside(data []byte) (string, error) {
	aside, err := s.placeAside(func(target string) (err error) {
		f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		defer func() {
			if err != nil {
				f.Close()
				os.Remove(target)
			}
		}()
		if _, err = s.seams.write(f, data); err != nil {
			return err
		}
		if err = s.seams.sync(f); err != nil {
			return err
		}
		return f.Close()
	})
	if err != nil {
		return "", err
	}
	s.syncDir()
	return aside, nil
}

// placeAside tries <path>.corrupt-<UTC time>, then -2, -3, ... while place reports the name taken.
func (s *Store) placeAside(place func(target string) error) (string, error) {
	base := s.path + ".corrupt-" + s.seams.now().UTC().Format(asideTimeFormat)
	for i := 1; i <= 1000; i++ {
		target := base
		if i > 1 {
			target = base + "-" + strconv.Itoa(i)
		}
		err := place(target)
		if err == nil {
			return target, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("to %s: %w", target, err)
		}
	}
	return "", fmt.Errorf("no free name for %s", base)
}

// removeStaleTemps deletes temp files a crashed write left behind. They are never the only copy
// of anything: the rename is the commit point, so the real file holds the last committed map.
func (s *Store) removeStaleTemps() {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return // load reports problems with the directory that matter
	}
	prefix := atomicfile.TempPrefix(s.name)
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		p := filepath.Join(s.dir, e.Name())
		if err := os.Remove(p); err != nil {
			s.log.Warn("cannot remove stale temp file", zap.String("path", p), zap.Error(err))
			continue
		}
		s.log.Info("removed temp file left by an interrupted write", zap.String("path", p))
	}
}

// Recovered reports the file that Open created to preserve a bad sessions file: the moved-aside
// corrupt or unreadable file, or the copy of a file with unusable entries. ok is false when the
// file was fine (or missing). Callers surface it so an operator can inspect what was lost.
func (s *Store) Recovered() (path string, ok bool) {
	return s.recovered, s.recovered != ""
}

// Path returns the full path of the sessions file.
func (s *Store) Path() string { return s.path }

// Get returns the thread id stored for key. It never waits for a write in flight.
func (s *Store) Get(key string) (threadID string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	threadID, ok = s.m[key]
	return threadID, ok
}

// Len returns the number of stored chat keys.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// Snapshot returns a copy of the map.
func (s *Store) Snapshot() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.m)
}

// Stats returns the write counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Dirty = s.dirty
	return st
}

// Set records threadID for key and returns once the file holds it (or the write failed).
// Concurrent Sets share one file write. Setting the value a key already has writes nothing new,
// but still waits until that value is durable.
//
// Policy, owned by the caller (supervisor): record a thread id only after the thread's first
// turn completed, so that a thread codex never persisted (its rollout would be missing) is not
// resumed after a restart.
//
// On a write error the new value stays in memory (Get returns it) and the error, wrapped and
// naming the file, is returned; the next Set, Delete or Flush writes it again.
func (s *Store) Set(key, threadID string) error {
	if key == "" {
		return errors.New("sessions: set: empty chat key")
	}
	if threadID == "" {
		return fmt.Errorf("sessions: set %q: empty thread id (use Delete)", key)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.m[key]; ok && cur == threadID {
		if err := s.flushLocked(); err != nil {
			return fmt.Errorf("sessions: set %q: %w", key, err)
		}
		return nil
	}
	s.m[key] = threadID
	if err := s.commitLocked(s.joinLocked()); err != nil {
		return fmt.Errorf("sessions: set %q: %w", key, err)
	}
	return nil
}

// Delete forgets key and returns once the file no longer holds it (or the write failed), with
// the same coalescing and error behaviour as Set. Deleting a missing key writes nothing new.
func (s *Store) Delete(key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[key]; !ok {
		if err := s.flushLocked(); err != nil {
			return fmt.Errorf("sessions: delete %q: %w", key, err)
		}
		return nil
	}
	delete(s.m, key)
	if err := s.commitLocked(s.joinLocked()); err != nil {
		return fmt.Errorf("sessions: delete %q: %w", key, err)
	}
	return nil
}

// Flush makes everything in memory durable: it waits for a write in flight and retries after a
// failed one. It writes nothing when the file is already up to date.
func (s *Store) Flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.flushLocked(); err != nil {
		return fmt.Errorf("sessions: flush: %w", err)
	}
	return nil
}

func (s *Store) flushLocked() error {
	b := s.pending
	if b == nil {
		switch {
		case s.writing:
			// The write in flight took a snapshot of the whole map, so it covers everything.
			b = s.inflight
		case s.dirty:
			b = s.joinLocked()
		default:
			return nil
		}
	}
	return s.commitLocked(b)
}

// joinLocked returns the pending batch, starting one if needed. Call it after changing s.m.
func (s *Store) joinLocked() *batch {
	if s.pending == nil {
		s.pending = &batch{}
	}
	s.seams.joined()
	return s.pending
}

// commitLocked waits until b is written and returns its outcome. If no write is in flight, the
// caller becomes the leader and writes the whole map for every change pending so far; otherwise it
// waits for the writes in flight. Called and returns with s.mu held; the file I/O runs without it.
func (s *Store) commitLocked(b *batch) error {
	for !b.done {
		if s.writing {
			s.cond.Wait()
			continue
		}
		// No write in flight and b is not done: b is still s.pending, because a leader takes a
		// batch and finishes it within one writing period. Lead it.
		s.pending, s.inflight, s.writing = nil, b, true
		snap := maps.Clone(s.m)
		s.mu.Unlock()
		err := s.writeFile(snap)
		s.mu.Lock()
		s.inflight, s.writing = nil, false
		b.done, b.err = true, err
		if err != nil {
			s.dirty = true
			s.stats.FailedWrites++
			s.log.Error("writing sessions file failed; changes stay in memory and are retried on the next change",
				zap.String("path", s.path), zap.Error(err))
		} else {
			// The file now holds the whole map, including changes from earlier failed writes.
			s.dirty = false
			s.stats.Writes++
		}
		s.cond.Broadcast()
	}
	return b.err
}

// writeFile replaces the file with m atomically and durably (see atomicfile.WriteFile).
func (s *Store) writeFile(m map[string]string) error {
	data, err := encode(m)
	if err != nil {
		return fmt.Errorf("encode %s: %w", s.path, err)
	}
	return atomicfile.WriteFile(s.path, data, atomicfile.Options{Write: s.seams.write, Sync: s.seams.sync})
}

// syncDir makes a rename or create in the directory durable; failures are logged, because the
// aside file already exists and there is nothing better to do.
func (s *Store) syncDir() {
	if err := atomicfile.SyncDir(s.dir); err != nil {
		s.log.Warn("cannot fsync state dir", zap.String("dir", s.dir), zap.Error(err))
	}
}

// encode renders m like Python's json.dump(m, f, indent=2, sort_keys=True): sorted keys, two-space
// indent, ": " between key and value. HTML escaping is off so ids stay readable.
func encode(m map[string]string) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(m); err != nil { // map keys are emitted sorted
		return nil, err
	}
	return buf.Bytes(), nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// ArchiveFileName is the file in the store's folder that keeps the thread ids chats left with
// Archive (the chat command /new, a stored thread codex could not resume): one JSON object a
// line, {"chat_key", "thread_id", "archived_at", "reason"}, oldest first. sessions.json keeps the Python daemon's flat shape, so archived
// ids live beside it rather than in it; an operator can still find, read or resume the old thread
// (until the retention settings archive and delete it: package retention reads these lines).
const ArchiveFileName = "threads-archive.jsonl"

// archived is one line of ArchiveFileName.
type archived struct {
	ChatKey    string    `json:"chat_key"`
	ThreadID   string    `json:"thread_id"`
	ArchivedAt time.Time `json:"archived_at"`
	// Reason says why the chat left the thread ("/new"; "not resumable: …").
	Reason string `json:"reason,omitempty"`
}

// Archive makes key's next message start a new thread: it appends key's thread id and reason
// to ArchiveFileName (fsynced) and then forgets it, as Delete. It returns the archived id, or ""
// when key had none (then nothing is written). When the append fails the key keeps its thread.
func (s *Store) Archive(key, reason string) (string, error) {
	id, ok := s.Get(key)
	if !ok {
		return "", nil
	}
	line, err := json.Marshal(archived{ChatKey: key, ThreadID: id, ArchivedAt: s.seams.now().UTC(), Reason: reason})
	if err != nil {
		return "", fmt.Errorf("sessions: archive %q: %w", key, err)
	}
	path := filepath.Join(s.dir, ArchiveFileName)
	f, err := atomicfile.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return "", fmt.Errorf("sessions: archive %q: %w", key, err)
	}
	_, werr := f.Write(append(line, '\n'))
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return "", fmt.Errorf("sessions: archive %q to %s: %w", key, path, werr)
	}
	if err := s.Delete(key); err != nil {
		return id, err
	}
	return id, nil
}
