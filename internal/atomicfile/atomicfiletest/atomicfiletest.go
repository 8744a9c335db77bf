// Package atomicfiletest plants symbolic links at state file paths for tests: the link points at
// a victim file outside the state directory, which must come through untouched.
package atomicfiletest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// Victim is a file a planted link points at.
type Victim struct {
	Link, Path string
	Content    []byte
}

// PlantSymlink creates a victim file in a fresh temp directory and a symbolic link to it at
// path (whose directory must exist). content is the victim's content; nil means a recognisable
// default.
func PlantSymlink(t testing.TB, path string, content []byte) Victim {
	t.Helper()
	if content == nil {
		content = []byte("victim: must never be read as state, truncated or replaced\n")
	}
	v := Victim{Link: path, Path: filepath.Join(t.TempDir(), "victim"), Content: content}
	if err := os.WriteFile(v.Path, content, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(v.Path, path); err != nil {
		t.Fatal(err)
	}
	return v
}

// AssertUntouched fails the test unless the victim holds its original content and the link is
// still a link to it.
func (v Victim) AssertUntouched(t testing.TB) {
	t.Helper()
	if got, err := os.ReadFile(v.Path); err != nil || !bytes.Equal(got, v.Content) {
		t.Errorf("victim %s behind the link %s changed: %q, %v; want %q", v.Path, v.Link, got, err, v.Content)
	}
	if target, err := os.Readlink(v.Link); err != nil || target != v.Path {
		t.Errorf("link %s = %q, %v; want it left pointing at %s", v.Link, target, err, v.Path)
	}
}
