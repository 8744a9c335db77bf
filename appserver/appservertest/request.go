package appservertest

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// NormaliseRequest returns a model request body codex sent (a Responses API request as a mock
// model recorded it) with what differs between any two runs of the same conversation replaced,
// so that two runs compare byte for byte:
//   - each key of literals (a thread id, a CODEX_HOME or workspace path) by its value;
//   - the ids codex gives input items ("id":"msg_<uuid>");
//   - in client_metadata, the turn, root turn and installation ids, the websocket request's
//     start time, and in its x-codex-turn-metadata document the context window id and the
//     turn's start time;
//   - the order of keys, which codex writes in no fixed order in client_metadata: every object's
//     keys come out sorted, and x-codex-turn-metadata is decoded in place.
func NormaliseRequest(raw []byte, literals map[string]string) (string, error) {
	var body struct {
		Meta map[string]string `json:"client_metadata"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		return "", fmt.Errorf("normalise request: %w", err)
	}
	s := string(raw)
	for _, k := range []string{"turn_id", "root_turn_id", "x-codex-installation-id"} {
		if v := body.Meta[k]; v != "" {
			s = strings.ReplaceAll(s, v, "<"+k+">")
		}
	}
	for from, to := range literals {
		if from != "" {
			s = strings.ReplaceAll(s, from, to)
		}
	}
	s = itemID.ReplaceAllString(s, `"id":"<item>"`)
	var v map[string]any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return "", fmt.Errorf("normalise request: replacing made it invalid: %w", err)
	}
	if m, ok := v["client_metadata"].(map[string]any); ok {
		// Over the websocket codex stamps each request with the time it started sending it.
		if _, ok := m["x-codex-ws-stream-request-start-ms"]; ok {
			m["x-codex-ws-stream-request-start-ms"] = "<x-codex-ws-stream-request-start-ms>"
		}
		if tm, ok := m["x-codex-turn-metadata"].(string); ok {
			var inner map[string]any
			if json.Unmarshal([]byte(tm), &inner) == nil {
				for _, k := range []string{"context_window_id", "turn_started_at_unix_ms"} {
					if _, ok := inner[k]; ok {
						inner[k] = "<" + k + ">"
					}
				}
				m["x-codex-turn-metadata"] = inner
			}
		}
	}
	out, err := json.Marshal(v) // map keys sorted
	if err != nil {
		return "", fmt.Errorf("normalise request: %w", err)
	}
	return string(out), nil
}

var itemID = regexp.MustCompile(`"id":"msg_[0-9a-f-]{36}"`)

// FirstDifference shows where a and b part: a window of each around the first differing byte.
func FirstDifference(a, b string) string {
	i := 0
	for i < min(len(a), len(b)) && a[i] == b[i] {
		i++
	}
	lo := max(0, i-200)
	return fmt.Sprintf("from byte %d:\n a: …%.500s\n b: …%.500s", i, a[lo:], b[lo:])
}

// HomeFiles lists the files under a CODEX_HOME, relative to it and sorted, with what differs
// between any two runs replaced: each key of literals (a thread id) by its value, the date
// directories of sessions/, and the time in rollout file names. Left out, because whether they
// outlive a codex process depends on its exit's timing: SQLite's -wal and -shm files, and the
// per-thread locks under thread-writer-locks/ (removed as the thread's writer closes).
func HomeFiles(home string, literals map[string]string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(home, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(home, p)
		if err != nil {
			return err
		}
		if strings.HasSuffix(rel, "-wal") || strings.HasSuffix(rel, "-shm") ||
			(filepath.Dir(rel) == "thread-writer-locks" && !strings.HasPrefix(filepath.Base(rel), ".")) {
			return nil
		}
		for from, to := range literals {
			if from != "" {
				rel = strings.ReplaceAll(rel, from, to)
			}
		}
		rel = datePath.ReplaceAllString(rel, "sessions/<date>/")
		rel = rolloutTime.ReplaceAllString(rel, "rollout-<time>-")
		out = append(out, rel)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list codex home %s: %w", home, err)
	}
	slices.Sort(out)
	return out, nil
}

var (
	datePath    = regexp.MustCompile(`^sessions/\d{4}/\d\d/\d\d/`)
	rolloutTime = regexp.MustCompile(`rollout-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-`)
)
