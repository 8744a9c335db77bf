package ledger

// The finished ids behind the cursor, kept apart from bridge-state.json so that a message costs
// a small, fixed write.
//
// bridge-state.json is replaced whole after every message. It used to carry the ids of the last
// RecentIDs finished messages (4,096 by default), about 170 KB written twice per message once
// that many had gone through. Those ids now go to DoneLogFileName instead: appended (fsynced)
// as they pass behind the cursor, before the state file that moves the cursor past them is
// written, and rewritten from memory at start and once the file holds about twice RecentIDs
// lines. bridge-state.json keeps the ids finished ahead of the cursor, which the unacked window
// bounds. A state file written before the done log existed lists all of them in "done", and is
// read as before.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/molecule-ai/codex-warm/internal/atomicfile"
)

// DoneLogFileName is the file beside StateFileName with the finished ids behind the cursor: one
// JSON string a line, oldest first.
const DoneLogFileName = "bridge-done.jsonl"

// readDoneLog returns the ids of path's complete lines, oldest first. A last line cut short by a
// kill during an append is left out (its write had not completed), and cut reports it; so are
// lines that are not a JSON string. A missing file is no ids.
func readDoneLog(path string) (ids []string, cut bool, err error) {
	b, err := atomicfile.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return ids, true, nil
		}
		var id string
		if json.Unmarshal(b[:i], &id) == nil && id != "" {
			ids = append(ids, id)
		}
		b = b[i+1:]
	}
	return ids, false, nil
}

// encodeDoneLog renders ids as DoneLogFileName's lines.
func encodeDoneLog(ids []string) []byte {
	var buf []byte
	for _, id := range ids {
		q, _ := json.Marshal(id) // a string always marshals
		buf = append(append(buf, q...), '\n')
	}
	return buf
}

// appendDoneLog appends ids to path and fsyncs it.
func appendDoneLog(path string, ids []string) error {
	f, err := atomicfile.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("append to %s: %w", path, err)
	}
	_, err = f.Write(encodeDoneLog(ids))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("append to %s: %w", path, err)
	}
	return nil
}

// rewriteDoneLog replaces path with ids atomically.
func rewriteDoneLog(path string, ids []string) error {
	return atomicfile.WriteFile(path, encodeDoneLog(ids), atomicfile.Options{})
}
