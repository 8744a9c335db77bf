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
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/molecule-ai/codex-warm/internal/atomicfile"
	"github.com/molecule-ai/codex-warm/internal/atomicfile/atomicfiletest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// asideName is what a moved-aside or copied-aside file must look like.
var asideName = regexp.MustCompile(`^sessions\.json\.corrupt-\d{8}T\d{6}Z(-\d+)?$`)

func observed() (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.DebugLevel)
	return zap.New(core), logs
}

func openT(t *testing.T, dir string, sm seams) (*Store, *observer.ObservedLogs) {
	t.Helper()
	log, logs := observed()
	s, err := open(Config{Dir: dir, Logger: log}, sm)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	return s, logs
}

// readMap reads the file the way any other reader would: a plain JSON object of strings.
func readMap(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	var m map[string]string
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("%s is not a flat JSON object of strings: %v\n%s", path, err, data)
	}
	if m == nil {
		t.Fatalf("%s holds null, want an object", path)
	}
	return m
}

func namesWith(t *testing.T, dir, substr string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("read dir %s: %v", dir, err)
	}
	var out []string
	for _, e := range entries {
		if strings.Contains(e.Name(), substr) {
			out = append(out, e.Name())
		}
	}
	return out
}

func assertNoTemps(t *testing.T, dir string) {
	t.Helper()
	if tmps := namesWith(t, dir, DefaultFileName+".tmp-"); len(tmps) != 0 {
		t.Errorf("temp files left behind in %s: %v", dir, tmps)
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// The Python daemon's file is read as is, and after a Set it is still a flat JSON object with the
// old entries plus the new one.
func TestOpenReadsPythonDaemonFile(t *testing.T) {
	want := map[string]string{
		"canvas:ws-1": "0199a8f2-6c1e-7d33-9b1a-2f4c5d6e7a80",
		"peer:ws-2":   "0199a8f3-0b4d-7e21-8c9f-a1b2c3d4e5f6",
		"peer:9f1c2d3e-4b5a-6978-8a9b-0c1d2e3f4a5b": "0199a8f4-77aa-7bcd-9e0f-123456789abc",
	}
	for _, fixture := range []string{"python-default.json", "python-indent2.json"} {
		t.Run(fixture, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", fixture))
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			writeFile(t, filepath.Join(dir, DefaultFileName), data)

			s, logs := openT(t, dir, defaultSeams())
			if p, ok := s.Recovered(); ok {
				t.Fatalf("Recovered() = %q, true for a good file", p)
			}
			if n := logs.FilterLevelExact(zapcore.ErrorLevel).Len() + logs.FilterLevelExact(zapcore.WarnLevel).Len(); n != 0 {
				t.Errorf("good file logged %d warnings/errors: %v", n, logs.All())
			}
			for k, v := range want {
				if got, ok := s.Get(k); !ok || got != v {
					t.Errorf("Get(%q) = %q, %v; want %q", k, got, ok, v)
				}
			}
			if s.Len() != len(want) {
				t.Errorf("Len() = %d, want %d", s.Len(), len(want))
			}
			// Opening alone must not rewrite the old daemon's file.
			if st := s.Stats(); st.Writes != 0 {
				t.Errorf("Open wrote the file %d times", st.Writes)
			}

			if err := s.Set("peer:ws-new", "0199ffff-0000-7000-8000-000000000001"); err != nil {
				t.Fatalf("Set: %v", err)
			}
			wantAfter := maps.Clone(want)
			wantAfter["peer:ws-new"] = "0199ffff-0000-7000-8000-000000000001"
			if got := readMap(t, s.Path()); !maps.Equal(got, wantAfter) {
				t.Errorf("file after Set = %v, want %v", got, wantAfter)
			}
			assertNoTemps(t, dir)
		})
	}
}

// The written file is exactly what Python's json.dump(m, f, indent=2, sort_keys=True) would write
// (plus a final newline), so both daemons and humans read it the same way.
func TestFileFormat(t *testing.T) {
	dir := t.TempDir()
	s, _ := openT(t, dir, defaultSeams())
	for _, kv := range [][2]string{{"peer:b", "id-<2>&"}, {"canvas:a", "id-1"}, {"peer:a", "id-3"}} {
		if err := s.Set(kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	want := "{\n  \"canvas:a\": \"id-1\",\n  \"peer:a\": \"id-3\",\n  \"peer:b\": \"id-<2>&\"\n}\n"
	if string(got) != want {
		t.Errorf("file =\n%s\nwant\n%s", got, want)
	}
}

// A file that is not a JSON object, or cannot be read, is moved aside byte for byte, reported
// with both paths, and the store starts empty; the next Set writes a fresh file and leaves the
// aside file alone.
func TestOpenMovesBadFileAside(t *testing.T) {
	regular := func(content string) func(t *testing.T, path string) {
		return func(t *testing.T, path string) { writeFile(t, path, []byte(content)) }
	}
	cases := []struct {
		name  string
		setup func(t *testing.T, path string)
		// check verifies the aside file is the original, intact.
		check func(t *testing.T, aside string)
	}{
		{name: "garbage", setup: regular("\x00\x01not json at all")},
		{name: "truncated", setup: regular(`{"canvas:ws-1": "0199a8f2-6c1e`)},
		{name: "array", setup: regular(`["canvas:ws-1", "0199"]`)},
		{name: "null", setup: regular("null")},
		{name: "string", setup: regular(`"canvas:ws-1"`)},
		{name: "number", setup: regular("42\n")},
		{name: "trailing data", setup: regular(`{"canvas:ws-1": "a"} {"peer:x": "b"}`)},
		{name: "python NaN", setup: regular(`{"canvas:ws-1": NaN}`)},
		{
			// Reading a directory fails with EISDIR: a real unreadable file, even as root.
			name: "directory",
			setup: func(t *testing.T, path string) {
				if err := os.Mkdir(path, 0o700); err != nil {
					t.Fatal(err)
				}
				writeFile(t, filepath.Join(path, "inner"), []byte("keep me"))
			},
			check: func(t *testing.T, aside string) {
				if got, err := os.ReadFile(filepath.Join(aside, "inner")); err != nil || string(got) != "keep me" {
					t.Errorf("aside directory content = %q, %v", got, err)
				}
			},
		},
		{
			// Opening a FIFO for reading would block forever; Open must not hang on one.
			name: "fifo",
			setup: func(t *testing.T, path string) {
				if err := syscall.Mkfifo(path, 0o600); err != nil {
					t.Fatal(err)
				}
			},
			check: func(t *testing.T, aside string) {
				fi, err := os.Lstat(aside)
				if err != nil || fi.Mode().Type() != fs.ModeNamedPipe {
					t.Errorf("aside = %v, %v; want the fifo", fi, err)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, DefaultFileName)
			tc.setup(t, path)
			var original []byte
			if fi, err := os.Lstat(path); err == nil && fi.Mode().IsRegular() {
				original, _ = os.ReadFile(path)
			}

			s, logs := openT(t, dir, defaultSeams())
			if s.Len() != 0 {
				t.Errorf("Len() = %d, want 0", s.Len())
			}
			aside, ok := s.Recovered()
			if !ok || filepath.Dir(aside) != dir || !asideName.MatchString(filepath.Base(aside)) {
				t.Fatalf("Recovered() = %q, %v; want %s/sessions.json.corrupt-<UTC time>", aside, ok, dir)
			}
			if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("bad file still at %s (err %v)", path, err)
			}
			check := tc.check
			if check == nil {
				check = func(t *testing.T, aside string) {
					if got, err := os.ReadFile(aside); err != nil || !bytes.Equal(got, original) {
						t.Errorf("aside content = %q, %v; want %q", got, err, original)
					}
				}
			}
			check(t, aside)

			errs := logs.FilterLevelExact(zapcore.ErrorLevel).All()
			if len(errs) != 1 {
				t.Fatalf("want one Error log, got %v", logs.All())
			}
			if f := errs[0].ContextMap(); f["path"] != path || f["moved_to"] != aside {
				t.Errorf("Error log fields = %v; want path=%s moved_to=%s", f, path, aside)
			}

			if err := s.Set("canvas:ws-1", "fresh"); err != nil {
				t.Fatalf("Set after recovery: %v", err)
			}
			if got := readMap(t, path); !maps.Equal(got, map[string]string{"canvas:ws-1": "fresh"}) {
				t.Errorf("fresh file = %v", got)
			}
			check(t, aside) // untouched by the write

			s2, _ := openT(t, dir, defaultSeams())
			if _, ok := s2.Recovered(); ok {
				t.Error("fresh file reported as recovered on reopen")
			}
			if got := s2.Snapshot(); !maps.Equal(got, map[string]string{"canvas:ws-1": "fresh"}) {
				t.Errorf("reopened = %v", got)
			}
		})
	}
}

// An empty file holds nothing to preserve: it is an empty map, reported at Warn, not moved aside.
func TestOpenEmptyFile(t *testing.T) {
	for _, content := range []string{"", " \n\t\n"} {
		t.Run(fmt.Sprintf("%q", content), func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, filepath.Join(dir, DefaultFileName), []byte(content))
			s, logs := openT(t, dir, defaultSeams())
			if s.Len() != 0 {
				t.Errorf("Len() = %d", s.Len())
			}
			if p, ok := s.Recovered(); ok {
				t.Errorf("Recovered() = %q for an empty file", p)
			}
			if aside := namesWith(t, dir, ".corrupt-"); len(aside) != 0 {
				t.Errorf("aside files %v for an empty file", aside)
			}
			if logs.FilterLevelExact(zapcore.WarnLevel).Len() != 1 {
				t.Errorf("want one Warn, got %v", logs.All())
			}
			if err := s.Set("peer:p", "t"); err != nil {
				t.Fatal(err)
			}
			if got := readMap(t, s.Path()); !maps.Equal(got, map[string]string{"peer:p": "t"}) {
				t.Errorf("file = %v", got)
			}
		})
	}
}

// An object with some unusable entries keeps the usable ones; the original is copied aside
// before the cleaned map replaces it.
func TestOpenPartiallyValidFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, DefaultFileName)
	original := []byte(`{"canvas:ws-1": "t1", "peer:ws-2": 7, "peer:ws-3": null, "": "t4",` +
		` "peer:ws-5": {"id": "x"}, "peer:ws-6": "", "peer:ws-7": "t7", "peer:ws-8": ["t8"]}`)
	writeFile(t, path, original)

	s, logs := openT(t, dir, defaultSeams())
	want := map[string]string{"canvas:ws-1": "t1", "peer:ws-7": "t7"}
	if got := s.Snapshot(); !maps.Equal(got, want) {
		t.Errorf("Snapshot() = %v, want %v", got, want)
	}
	aside, ok := s.Recovered()
	if !ok || !asideName.MatchString(filepath.Base(aside)) {
		t.Fatalf("Recovered() = %q, %v", aside, ok)
	}
	if got, err := os.ReadFile(aside); err != nil || !bytes.Equal(got, original) {
		t.Errorf("aside copy = %q, %v; want the original bytes", got, err)
	}
	if n := logs.FilterMessage("dropping unusable sessions entry").Len(); n != 6 {
		t.Errorf("%d dropped-entry warnings, want 6: %v", n, logs.All())
	}
	errs := logs.FilterLevelExact(zapcore.ErrorLevel).All()
	if len(errs) != 1 || errs[0].ContextMap()["copied_to"] != aside || errs[0].ContextMap()["path"] != path {
		t.Errorf("want one Error naming both paths, got %v", errs)
	}
	// The cleaned map is already on disk, so the next start does not copy aside again.
	if got := readMap(t, path); !maps.Equal(got, want) {
		t.Errorf("file after Open = %v, want %v", got, want)
	}
	s2, _ := openT(t, dir, defaultSeams())
	if _, ok := s2.Recovered(); ok {
		t.Error("cleaned file reported as recovered again")
	}
	if n := len(namesWith(t, dir, ".corrupt-")); n != 1 {
		t.Errorf("%d aside files, want 1", n)
	}
	assertNoTemps(t, dir)
}

// If the original of a partially valid file cannot be preserved, Open refuses rather than
// overwriting it.
func TestOpenPartialFileCopyFails(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, DefaultFileName)
	original := []byte(`{"canvas:ws-1": "t1", "peer:ws-2": 7}`)
	writeFile(t, path, original)
	sm := defaultSeams()
	sm.write = func(f *os.File, b []byte) (int, error) {
		if strings.Contains(f.Name(), ".corrupt-") {
			return 0, &fs.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
		}
		return f.Write(b)
	}
	_, err := open(Config{Dir: dir}, sm)
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), path) {
		t.Fatalf("open err = %v; want ENOSPC naming %s", err, path)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, original) {
		t.Errorf("original changed to %q", got)
	}
	if aside := namesWith(t, dir, ".corrupt-"); len(aside) != 0 {
		t.Errorf("incomplete aside copy left: %v", aside)
	}
	assertNoTemps(t, dir)
}

// Two corruptions in the same second get two aside files; neither overwrites the other.
func TestAsideFilesNeverOverwritten(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, DefaultFileName)
	sm := defaultSeams()
	sm.now = func() time.Time { return time.Date(2026, 11, 21, 10, 15, 0, 0, time.UTC) }
	var asides []string
	for _, content := range []string{"first garbage", "second garbage", `{"peer:a": 1}`} {
		writeFile(t, path, []byte(content))
		s, _ := openT(t, dir, sm)
		a, ok := s.Recovered()
		if !ok {
			t.Fatalf("%q not recovered", content)
		}
		asides = append(asides, a)
	}
	want := []string{
		path + ".corrupt-20261121T101500Z",
		path + ".corrupt-20261121T101500Z-2",
		path + ".corrupt-20261121T101500Z-3",
	}
	if !slicesEqual(asides, want) {
		t.Fatalf("aside paths = %v, want %v", asides, want)
	}
	for i, content := range []string{"first garbage", "second garbage", `{"peer:a": 1}`} {
		if got, _ := os.ReadFile(asides[i]); string(got) != content {
			t.Errorf("%s = %q, want %q", asides[i], got, content)
		}
	}
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// gate holds the first file write until n changes have joined, so the test knows for certain
// that the other n-1 Sets arrived while a write was in flight.
type gate struct {
	n      int64
	joined atomic.Int64
	all    chan struct{}
	calls  atomic.Int64
}

func newGate(n int) *gate { return &gate{n: int64(n), all: make(chan struct{})} }

func (g *gate) onJoin() {
	if g.joined.Add(1) == g.n {
		close(g.all)
	}
}

// wrap returns a write seam that blocks the first call on the gate and then defers to fail
// (by 1-based call number) or the real write.
func (g *gate) wrap(fail func(call int64) error) func(*os.File, []byte) (int, error) {
	return func(f *os.File, b []byte) (int, error) {
		call := g.calls.Add(1)
		if call == 1 {
			<-g.all
		}
		if err := fail(call); err != nil {
			return 0, &fs.PathError{Op: "write", Path: f.Name(), Err: err}
		}
		return f.Write(b)
	}
}

func runSets(s *Store, n int) []error {
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = s.Set(fmt.Sprintf("peer:ws-%03d", i), fmt.Sprintf("thread-%03d", i))
		})
	}
	close(start)
	wg.Wait()
	return errs
}

func wantAll(n int) map[string]string {
	m := map[string]string{}
	for i := range n {
		m[fmt.Sprintf("peer:ws-%03d", i)] = fmt.Sprintf("thread-%03d", i)
	}
	return m
}

// 100 concurrent Sets: the first takes the write; the 99 that arrive meanwhile share exactly
// one more write, and every Set returns only after its key is in the file.
func TestConcurrentSetsCoalesce(t *testing.T) {
	const n = 100
	dir := t.TempDir()
	g := newGate(n)
	sm := defaultSeams()
	sm.joined = g.onJoin
	sm.write = g.wrap(func(int64) error { return nil })
	s, _ := openT(t, dir, sm)

	for i, err := range runSets(s, n) {
		if err != nil {
			t.Errorf("Set %d: %v", i, err)
		}
	}
	if got := readMap(t, s.Path()); !maps.Equal(got, wantAll(n)) {
		t.Errorf("file has %d entries, want %d", len(got), n)
	}
	if st := s.Stats(); st.Writes != 2 || st.FailedWrites != 0 || st.Dirty {
		t.Errorf("Stats() = %+v; want exactly 2 writes for %d Sets", st, n)
	}
	assertNoTemps(t, dir)
}

// Ungated, with readers racing the writers (run with -race): the file ends valid and complete,
// and there are never more writes than Sets.
func TestConcurrentSetsStress(t *testing.T) {
	const n = 100
	dir := t.TempDir()
	s, _ := openT(t, dir, defaultSeams())
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 4 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					_ = s.Snapshot()
					_, _ = s.Get("peer:ws-001")
					_ = s.Stats()
					_ = s.Len()
				}
			}
		})
	}
	errs := runSets(s, n)
	close(stop)
	readers.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Set %d: %v", i, err)
		}
	}
	if got := readMap(t, s.Path()); !maps.Equal(got, wantAll(n)) {
		t.Errorf("file has %d entries, want %d", len(got), n)
	}
	st := s.Stats()
	if st.Writes < 1 || st.Writes > n {
		t.Errorf("Writes = %d for %d Sets", st.Writes, n)
	}
	t.Logf("%d Sets took %d file writes", n, st.Writes)
}

// A failed group write gives every waiter of that batch the same error; memory keeps all values
// and a Flush writes them.
func TestGroupFailureShared(t *testing.T) {
	const n = 100
	dir := t.TempDir()
	g := newGate(n)
	sm := defaultSeams()
	sm.joined = g.onJoin
	sm.write = g.wrap(func(call int64) error {
		if call == 2 {
			return syscall.ENOSPC
		}
		return nil
	})
	s, _ := openT(t, dir, sm)

	var failed []error
	for _, err := range runSets(s, n) {
		if err != nil {
			failed = append(failed, err)
		}
	}
	if len(failed) != n-1 {
		t.Fatalf("%d Sets failed, want %d (all but the first writer)", len(failed), n-1)
	}
	shared := errors.Unwrap(failed[0])
	for _, err := range failed {
		if !errors.Is(err, syscall.ENOSPC) || errors.Unwrap(err) != shared {
			t.Fatalf("error %v is not the shared ENOSPC %v", err, shared)
		}
	}
	if st := s.Stats(); st.Writes != 1 || st.FailedWrites != 1 || !st.Dirty {
		t.Errorf("Stats() = %+v", st)
	}
	if got := s.Snapshot(); !maps.Equal(got, wantAll(n)) {
		t.Errorf("memory lost values: %d entries", len(got))
	}
	if err := s.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if got := readMap(t, s.Path()); !maps.Equal(got, wantAll(n)) {
		t.Errorf("file after Flush has %d entries", len(got))
	}
	if st := s.Stats(); st.Dirty || st.Writes != 2 {
		t.Errorf("Stats() after Flush = %+v", st)
	}
	assertNoTemps(t, dir)
}

// A write that fails returns an error naming the file and the cause; the old file stays intact,
// memory keeps the value, no temp file remains, and a later Flush or Set writes it.
//
// Two faults are real (the state dir vanished; a directory sits where the file goes, so rename
// fails even for root); ENOSPC and EIO cannot be provoked by a root test process
// without mounting a filesystem, so they come through the write/fsync seam.
func TestWriteFailure(t *testing.T) {
	faults := []struct {
		name   string
		errno  syscall.Errno
		inject func(t *testing.T, s *Store, dir string)
		repair func(t *testing.T, s *Store, dir string)
	}{
		{
			name:  "ENOSPC on write (injected, half written)",
			errno: syscall.ENOSPC,
			inject: func(t *testing.T, s *Store, dir string) {
				s.seams.write = func(f *os.File, b []byte) (int, error) {
					n, _ := f.Write(b[:len(b)/2])
					return n, &fs.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
				}
			},
			repair: func(t *testing.T, s *Store, dir string) { s.seams.write = (*os.File).Write },
		},
		{
			name:  "EIO on fsync (injected)",
			errno: syscall.EIO,
			inject: func(t *testing.T, s *Store, dir string) {
				s.seams.sync = func(f *os.File) error { return &fs.PathError{Op: "sync", Path: f.Name(), Err: syscall.EIO} }
			},
			repair: func(t *testing.T, s *Store, dir string) { s.seams.sync = (*os.File).Sync },
		},
		{
			name:  "state dir removed (real)",
			errno: syscall.ENOENT,
			inject: func(t *testing.T, s *Store, dir string) {
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
			},
			repair: func(t *testing.T, s *Store, dir string) {
				if err := os.Mkdir(dir, 0o700); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			// os.Rename refuses to replace a directory with EEXIST (rename(2) itself says EISDIR).
			name:  "directory in the file's place (real)",
			errno: syscall.EEXIST,
			inject: func(t *testing.T, s *Store, dir string) {
				if err := os.Remove(s.Path()); err != nil {
					t.Fatal(err)
				}
				if err := os.Mkdir(s.Path(), 0o700); err != nil {
					t.Fatal(err)
				}
				writeFile(t, filepath.Join(s.Path(), "x"), nil)
			},
			repair: func(t *testing.T, s *Store, dir string) {
				if err := os.RemoveAll(s.Path()); err != nil {
					t.Fatal(err)
				}
			},
		},
	}
	retries := []struct {
		name  string
		retry func(s *Store) error
		want  map[string]string
	}{
		{"Flush", func(s *Store) error { return s.Flush() }, map[string]string{"canvas:a": "1", "peer:b": "2"}},
		{"Set other key", func(s *Store) error { return s.Set("peer:c", "3") }, map[string]string{"canvas:a": "1", "peer:b": "2", "peer:c": "3"}},
		{"Set same value", func(s *Store) error { return s.Set("peer:b", "2") }, map[string]string{"canvas:a": "1", "peer:b": "2"}},
	}
	for _, f := range faults {
		for _, r := range retries {
			t.Run(f.name+"/"+r.name, func(t *testing.T) {
				dir := filepath.Join(t.TempDir(), "state")
				s, _ := openT(t, dir, defaultSeams())
				if err := s.Set("canvas:a", "1"); err != nil {
					t.Fatal(err)
				}
				before, _ := os.ReadFile(s.Path())

				f.inject(t, s, dir)
				err := s.Set("peer:b", "2")
				if !errors.Is(err, f.errno) {
					t.Fatalf("Set err = %v; want %v", err, f.errno)
				}
				if !strings.Contains(err.Error(), s.Path()) {
					t.Errorf("error %q does not name %s", err, s.Path())
				}
				if got, ok := s.Get("peer:b"); !ok || got != "2" {
					t.Errorf("memory lost the value: %q, %v", got, ok)
				}
				if st := s.Stats(); !st.Dirty || st.FailedWrites != 1 {
					t.Errorf("Stats() = %+v; want dirty after a failed write", st)
				}
				if fi, err := os.Stat(s.Path()); err == nil && fi.Mode().IsRegular() {
					if got, _ := os.ReadFile(s.Path()); !bytes.Equal(got, before) {
						t.Errorf("failed write changed the file to %q", got)
					}
				}
				if _, err := os.Stat(dir); err == nil {
					assertNoTemps(t, dir)
				}

				f.repair(t, s, dir)
				if err := r.retry(s); err != nil {
					t.Fatalf("retry: %v", err)
				}
				if got := readMap(t, s.Path()); !maps.Equal(got, r.want) {
					t.Errorf("file after retry = %v, want %v", got, r.want)
				}
				if st := s.Stats(); st.Dirty {
					t.Errorf("still dirty after a successful retry: %+v", st)
				}
				assertNoTemps(t, dir)
			})
		}
	}
}

// What the API wrote survives a reopen; the file is 0600 and a directory Open created is 0700.
func TestReopenDurable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "state")
	s, _ := openT(t, dir, defaultSeams())
	steps := []func() error{
		func() error { return s.Set("canvas:ws-1", "t1") },
		func() error { return s.Set("peer:ws-2", "t2") },
		func() error { return s.Set("peer:ws-3", "t3") },
		func() error { return s.Set("canvas:ws-1", "t1b") },
		func() error { return s.Delete("peer:ws-2") },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	want := map[string]string{"canvas:ws-1": "t1b", "peer:ws-3": "t3"}
	if got := s.Snapshot(); !maps.Equal(got, want) {
		t.Fatalf("Snapshot() = %v", got)
	}
	s2, _ := openT(t, dir, defaultSeams())
	if got := s2.Snapshot(); !maps.Equal(got, want) {
		t.Errorf("reopened = %v, want %v", got, want)
	}
	for _, c := range []struct {
		path string
		mode fs.FileMode
	}{{s.Path(), 0o600}, {dir, 0o700 | fs.ModeDir}, {filepath.Dir(dir), 0o700 | fs.ModeDir}} {
		fi, err := os.Stat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != c.mode {
			t.Errorf("mode of %s = %v, want %v", c.path, fi.Mode(), c.mode)
		}
	}
}

// Unchanged values and missing keys do not cost a write; bad input writes nothing.
func TestNoopsAndValidation(t *testing.T) {
	dir := t.TempDir()
	s, _ := openT(t, dir, defaultSeams())
	if err := s.Set("", "t"); err == nil {
		t.Error("Set with empty key succeeded")
	}
	if err := s.Set("peer:a", ""); err == nil {
		t.Error("Set with empty thread id succeeded")
	}
	if _, err := os.Stat(s.Path()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("invalid Sets created the file (err %v)", err)
	}
	if err := s.Set("peer:a", "t"); err != nil {
		t.Fatal(err)
	}
	for i, op := range []func() error{
		func() error { return s.Set("peer:a", "t") },
		func() error { return s.Delete("peer:missing") },
		s.Flush,
	} {
		if err := op(); err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
	}
	if st := s.Stats(); st.Writes != 1 {
		t.Errorf("Writes = %d, want 1", st.Writes)
	}
}

func TestOpenErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "plainfile")
	writeFile(t, file, []byte("x"))
	cases := []struct {
		name  string
		cfg   Config
		errno error
	}{
		{name: "empty dir", cfg: Config{}},
		{name: "file name with slash", cfg: Config{Dir: t.TempDir(), FileName: "a/b.json"}},
		{name: "file name dotdot", cfg: Config{Dir: t.TempDir(), FileName: ".."}},
		{name: "dir under a regular file", cfg: Config{Dir: filepath.Join(file, "state")}, errno: syscall.ENOTDIR},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(tc.cfg)
			if err == nil {
				t.Fatalf("Open(%+v) = %v, nil; want an error", tc.cfg, s)
			}
			if tc.errno != nil && (!errors.Is(err, tc.errno) || !strings.Contains(err.Error(), tc.cfg.Dir)) {
				t.Errorf("err = %v; want %v naming %s", err, tc.errno, tc.cfg.Dir)
			}
		})
	}
}

// Open with a custom FileName and a nil Logger works and uses that file.
func TestCustomFileName(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Config{Dir: dir, FileName: "threads.json"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Path() != filepath.Join(dir, "threads.json") {
		t.Errorf("Path() = %s", s.Path())
	}
	if err := s.Set("peer:a", "t"); err != nil {
		t.Fatal(err)
	}
	if got := readMap(t, s.Path()); got["peer:a"] != "t" {
		t.Errorf("file = %v", got)
	}
}

// Temp files from an interrupted write are removed at Open; other files are left alone.
func TestOpenRemovesStaleTemps(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, DefaultFileName), []byte(`{"peer:a": "t"}`))
	writeFile(t, filepath.Join(dir, DefaultFileName+".tmp-123456"), []byte(`{"peer:a": "half`))
	writeFile(t, filepath.Join(dir, "inbox.json.tmp-1"), []byte("not ours"))
	s, _ := openT(t, dir, defaultSeams())
	if got, _ := s.Get("peer:a"); got != "t" {
		t.Errorf("Get = %q", got)
	}
	assertNoTemps(t, dir)
	if _, err := os.Stat(filepath.Join(dir, "inbox.json.tmp-1")); err != nil {
		t.Errorf("removed a file that is not ours: %v", err)
	}
}

// A symbolic link at sessions.json is neither read through nor replaced. Open fails with an error
// naming the path, and a link planted while the store runs makes the next write fail the same
// way; the file the link points at is untouched either way.
func TestSymlinkRefused(t *testing.T) {
	t.Run("at open", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, DefaultFileName)
		v := atomicfiletest.PlantSymlink(t, path, []byte(`{"canvas:victim": "someone-elses-thread"}`))
		s, err := open(Config{Dir: dir}, defaultSeams())
		if !errors.Is(err, atomicfile.ErrSymlink) || !strings.Contains(err.Error(), path) {
			t.Fatalf("Open = %v (store %v), want an error naming %s as a symbolic link", err, s, path)
		}
		v.AssertUntouched(t)
	})
	t.Run("at write", func(t *testing.T) {
		dir := t.TempDir()
		s, _ := openT(t, dir, defaultSeams())
		if err := s.Set("canvas:a", "1"); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(s.Path()); err != nil {
			t.Fatal(err)
		}
		v := atomicfiletest.PlantSymlink(t, s.Path(), nil)
		err := s.Set("peer:b", "2")
		if !errors.Is(err, atomicfile.ErrSymlink) || !strings.Contains(err.Error(), s.Path()) {
			t.Fatalf("Set = %v, want an error naming %s as a symbolic link", err, s.Path())
		}
		v.AssertUntouched(t)
		assertNoTemps(t, dir)
	})
}

// Archive appends the chat's thread id to the archive file (kept across calls and restarts),
// forgets it in sessions.json, and does nothing for a chat with no thread. A symbolic link in
// the archive's place is refused and the chat keeps its thread.
func TestArchive(t *testing.T) {
	dir := t.TempDir()
	s, _ := openT(t, dir, defaultSeams())
	for k, v := range map[string]string{"canvas:w": "t1", "peer:p": "t2"} {
		if err := s.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	if id, err := s.Archive("canvas:w", "/new"); err != nil || id != "t1" {
		t.Fatalf("Archive = %q, %v", id, err)
	}
	if id, err := s.Archive("nobody", "/new"); err != nil || id != "" {
		t.Fatalf("Archive of a chat with no thread = %q, %v", id, err)
	}
	s.Set("canvas:w", "t3")
	if _, err := s.Archive("canvas:w", "/new"); err != nil {
		t.Fatal(err)
	}
	s2, _ := openT(t, dir, defaultSeams())
	if _, ok := s2.Get("canvas:w"); ok || s2.Len() != 1 {
		t.Fatalf("after reopen: %v, want only peer:p", s2.Snapshot())
	}
	b, err := os.ReadFile(filepath.Join(dir, ArchiveFileName))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var a archived
		if err := json.Unmarshal([]byte(line), &a); err != nil || a.ArchivedAt.IsZero() {
			t.Fatalf("archive line %q: %v", line, err)
		}
		got = append(got, a.ChatKey+"="+a.ThreadID)
	}
	if want := []string{"canvas:w=t1", "canvas:w=t3"}; !slices.Equal(got, want) {
		t.Fatalf("archive %v, want %v", got, want)
	}
	if fi, _ := os.Stat(filepath.Join(dir, ArchiveFileName)); fi.Mode().Perm() != 0o600 {
		t.Errorf("archive mode %v, want 0600", fi.Mode().Perm())
	}

	link := t.TempDir()
	target := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.Symlink(target, filepath.Join(link, ArchiveFileName)); err != nil {
		t.Fatal(err)
	}
	s3, _ := openT(t, link, defaultSeams())
	s3.Set("k", "t9")
	if _, err := s3.Archive("k", "/new"); err == nil {
		t.Fatal("archived through a symbolic link")
	}
	if id, ok := s3.Get("k"); !ok || id != "t9" {
		t.Fatalf("a failed archive lost the thread: %q %v", id, ok)
	}
	if _, err := os.Stat(target); err == nil {
		t.Fatal("the link's target was created")
	}
}

// Check reports what Open would find and changes nothing: a good file's entries, a file with
// unusable entries (not copied aside), a corrupt file (ErrCorrupt, not moved aside), a symbolic
// link (refused), and no file at all, without creating the directory.
func TestCheckChangesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, DefaultFileName)
	listing := func() []string {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return names
	}

	missing := filepath.Join(dir, "no-such-dir")
	if rep, err := Check(missing); err != nil || rep.Exists || rep.Entries != 0 {
		t.Errorf("missing dir: %+v, %v", rep, err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Check created %s", missing)
	}

	for _, tc := range []struct {
		name, content    string
		entries, dropped int
		corrupt          bool
	}{
		{"good", `{"peer:a": "t1", "canvas:w": "t2"}`, 2, 0, false},
		{"unusable entries", `{"peer:a": "t1", "peer:b": 7}`, 1, 1, false},
		{"empty", "  \n", 0, 0, false},
		{"garbage", `{"peer:a": `, 0, 0, true},
		{"array", `["t1"]`, 0, 0, true},
	} {
		if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		rep, err := Check(dir)
		if errors.Is(err, ErrCorrupt) != tc.corrupt || (!tc.corrupt && err != nil) {
			t.Errorf("%s: error %v, corrupt want %v", tc.name, err, tc.corrupt)
		}
		if !tc.corrupt && (!rep.Exists || rep.Entries != tc.entries || rep.Dropped != tc.dropped) {
			t.Errorf("%s: %+v, want %d entries %d dropped", tc.name, rep, tc.entries, tc.dropped)
		}
		if got, err := os.ReadFile(path); err != nil || string(got) != tc.content {
			t.Errorf("%s: file changed to %q (%v)", tc.name, got, err)
		}
		if names := listing(); len(names) != 1 {
			t.Errorf("%s: directory holds %v, want only the file", tc.name, names)
		}
	}

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "elsewhere"), path); err != nil {
		t.Fatal(err)
	}
	if _, err := Check(dir); !errors.Is(err, atomicfile.ErrSymlink) {
		t.Errorf("symlink: %v, want ErrSymlink", err)
	}
}
