package childproc

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/molecule-ai/codex-warm/internal/atomicfile"
)

// Identity names one process across pid reuse. A process with the same pid but another start
// time is a stranger; start times count from boot, so an identity holds within one boot only.
type Identity struct {
	PID int
	// StartTime is field 22 of /proc/<pid>/stat: clock ticks after boot; 0 when unknown.
	StartTime uint64
	// Exe is /proc/<pid>/exe, when readable.
	Exe string
	// PGID and SID are the process group and session. A child started by Start leads both.
	PGID int
	SID  int
}

// ReadIdentity reads pid's identity from /proc; the zero Identity (but for PID) when pid is not a
// process of this machine, such as an in-memory test child.
func ReadIdentity(pid int) Identity {
	id := Identity{PID: pid}
	var p ProcFS
	st, err := p.Stat(pid)
	if err != nil {
		return id
	}
	exe, _ := p.Exe(pid)
	id.StartTime, id.Exe, id.PGID, id.SID = st.StartTime, exe, st.PGRP, st.Session
	return id
}

// Record identifies one live child in a record file. Its JSON is the format of the daemon's
// children.json, which the next daemon's boot sweep reads: keep it compatible.
type Record struct {
	PID int `json:"pid"`
	// StartTime is field 22 of /proc/<pid>/stat: clock ticks after boot.
	StartTime uint64 `json:"start_time"`
	// Exe is /proc/<pid>/exe at spawn, when readable.
	Exe string `json:"exe,omitempty"`
	// PGID and SID are the child's process group and session at spawn. Start makes children
	// the leaders of both (pgid == sid == pid), so that after the child died the sweep still
	// finds what it left running: tools in its group, and MCP servers, which codex starts in
	// process groups of their own within its session.
	PGID    int    `json:"pgid,omitempty"`
	SID     int    `json:"sid,omitempty"`
	ChatKey string `json:"chat_key,omitempty"`
}

// RecordOf is the record of the process id names, for the chat chatKey.
func RecordOf(id Identity, chatKey string) Record {
	return Record{PID: id.PID, StartTime: id.StartTime, Exe: id.Exe, PGID: id.PGID, SID: id.SID, ChatKey: chatKey}
}

// RecordFile is the content of a record file (the daemon's children.json).
type RecordFile struct {
	DaemonPID int       `json:"daemon_pid"`
	BootID    string    `json:"boot_id,omitempty"`
	Written   time.Time `json:"written"`
	Children  []Record  `json:"children"`
}

// WriteRecordFile atomically replaces the record file at path with f, never through a symbolic
// link.
func WriteRecordFile(path string, f RecordFile) error {
	if f.Children == nil {
		f.Children = []Record{}
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("encode children record: %w", err)
	}
	return atomicfile.WriteFile(path, append(b, '\n'), atomicfile.Options{})
}

// readRecordFile reads the record file at path; ok is false when there is none. It never reads
// through a symbolic link: a planted record would choose the processes signalled.
func readRecordFile(path string) (f RecordFile, ok bool, err error) {
	b, err := atomicfile.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return RecordFile{}, false, nil
	}
	if err != nil {
		return RecordFile{}, false, err
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return RecordFile{}, false, fmt.Errorf("%s is corrupt, orphans it listed are not swept: %w", path, err)
	}
	return f, true, nil
}
