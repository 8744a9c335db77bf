package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/molecule-ai/codex-warm/internal/atomicfile/atomicfiletest"
)

// WriteFile creates the file with the requested mode, replaces it, and leaves no temp file.
func TestWriteFileReplaces(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := WriteFile(path, []byte("one"), Options{}); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("two"), Options{Perm: 0o640}); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(path)
	if err != nil || string(got) != "two" {
		t.Fatalf("ReadFile = %q, %v", got, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode = %v, %v; want 0640", fi.Mode(), err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("directory holds %v, want only the file", ents)
	}
}

// Links are refused by every entry point, naming the path; anything but a regular file is
// refused by ReadFile without blocking (a FIFO) and without reading (a directory).
func TestRefusals(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "link")
	v := atomicfiletest.PlantSymlink(t, link, nil)
	for name, err := range map[string]error{
		"ReadFile":  func() error { _, err := ReadFile(link); return err }(),
		"OpenFile":  func() error { _, err := OpenFile(link, os.O_RDWR|os.O_CREATE, 0o600); return err }(),
		"WriteFile": WriteFile(link, []byte("x"), Options{}),
	} {
		if !errors.Is(err, ErrSymlink) || !strings.Contains(err.Error(), link) {
			t.Errorf("%s = %v, want ErrSymlink naming %s", name, err, link)
		}
	}
	v.AssertUntouched(t)

	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, dir} {
		if _, err := ReadFile(p); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), p) {
			t.Errorf("ReadFile(%s) = %v, want ErrNotRegular naming it", p, err)
		}
	}
}

// WriteFrom streams a reader into the file; a reader that fails leaves the file as it was and
// no temp file behind, and the reader's error is what the caller gets.
func TestWriteFromStreamsAndFailsWhole(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "upload.bin")
	n, err := WriteFrom(path, strings.NewReader(strings.Repeat("x", 100_000)), Options{})
	if err != nil || n != 100_000 {
		t.Fatalf("WriteFrom = %d, %v", n, err)
	}
	cut := errors.New("connection cut")
	_, err = WriteFrom(path, io.MultiReader(strings.NewReader("partial"), errReader{cut}), Options{})
	if !errors.Is(err, cut) {
		t.Fatalf("WriteFrom with a failing reader = %v, want it to wrap %v", err, cut)
	}
	got, err := ReadFile(path)
	if err != nil || len(got) != 100_000 {
		t.Fatalf("after a failed write the file has %d bytes (%v), want the 100000 of before", len(got), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want the file alone", len(entries))
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
