// Package atomicfile reads and replaces the daemon's state files (sessions.json,
// bridge-state.json, children.json, the lock file) safely.
//
// Replacing is atomic and durable: a temp file in the same directory is written, fsynced and
// renamed over the target, and then the directory is fsynced, because the rename itself is only
// durable once the directory entry is on disk. A crash leaves either the old or the new file.
//
// No state file is ever opened through a symbolic link. The state directory may be shared with
// other users' software (a home directory, a mounted volume); a link planted at a state file's
// path would otherwise make the daemon read another file as its state, or truncate and rewrite
// it. Reads and opens use O_NOFOLLOW; a replace checks the target with Lstat first (a rename over
// a link would only replace the link, but a link there is a sign of trouble, so it is refused the
// same way). Both fail with an error wrapping ErrSymlink that names the path. Only the last path
// element is checked: the directory itself is the operator's choice.
package atomicfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

var (
	// ErrSymlink means a state file's path is a symbolic link; it was neither followed nor
	// replaced.
	ErrSymlink = errors.New("is a symbolic link; refusing to follow or replace it (state files must be regular files)")
	// ErrNotRegular means a state file's path holds something other than a regular file (a
	// directory, a FIFO, a device).
	ErrNotRegular = errors.New("is not a regular file")
)

// DefaultPerm is the mode of files WriteFile creates when Options.Perm is zero.
const DefaultPerm os.FileMode = 0o600

// Options tune WriteFile. The zero value writes mode DefaultPerm with (*os.File).Write and Sync.
type Options struct {
	// Perm is the new file's mode. Zero means DefaultPerm.
	Perm os.FileMode
	// Write and Sync, when set, replace (*os.File).Write and (*os.File).Sync on the temp file:
	// tests inject the ENOSPC and EIO a test process cannot provoke otherwise.
	Write func(f *os.File, b []byte) (int, error)
	Sync  func(f *os.File) error
}

// TempPrefix is the name prefix of the temp files WriteFile creates beside a file named name. A
// crash between create and rename leaves one behind; its owner may remove it at start-up.
func TempPrefix(name string) string { return name + ".tmp-" }

// WriteFile replaces path with data atomically and durably (see the package doc). The temp file
// is removed on failure; errors name path.
func WriteFile(path string, data []byte, opt Options) error {
	_, err := WriteFrom(path, bytes.NewReader(data), opt)
	return err
}

// WriteFrom is WriteFile with the content read from r to its end: a file of any size is written
// without being held in memory. An error reading r fails the write (wrapped, the temp file
// removed) and leaves path as it was. It returns how many bytes were written.
func WriteFrom(path string, r io.Reader, opt Options) (n int64, err error) {
	if opt.Perm == 0 {
		opt.Perm = DefaultPerm
	}
	if opt.Write == nil {
		opt.Write = (*os.File).Write
	}
	if opt.Sync == nil {
		opt.Sync = (*os.File).Sync
	}
	if err := refuseSymlink(path); err != nil {
		return 0, err
	}
	dir := filepath.Dir(path)
	// CreateTemp opens with O_EXCL (which never follows a link) and mode 0600.
	tmp, err := os.CreateTemp(dir, TempPrefix(filepath.Base(path))+"*")
	if err != nil {
		return 0, fmt.Errorf("write %s: %w", path, err)
	}
	renamed := false
	defer func() {
		if err != nil && !renamed {
			_ = tmp.Close() // may already be closed; the first error is what matters
			_ = os.Remove(tmp.Name())
		}
	}()
	if n, err = io.Copy(fileWriter{tmp, opt.Write}, r); err != nil {
		return n, fmt.Errorf("write %s: %w", path, err)
	}
	if opt.Perm != 0o600 {
		if err = tmp.Chmod(opt.Perm); err != nil {
			return n, fmt.Errorf("write %s: chmod: %w", path, err)
		}
	}
	if err = opt.Sync(tmp); err != nil {
		return n, fmt.Errorf("write %s: fsync: %w", path, err)
	}
	if err = tmp.Close(); err != nil {
		return n, fmt.Errorf("write %s: close: %w", path, err)
	}
	// Checked again just before the rename: a link planted while the temp file was written.
	if err = refuseSymlink(path); err != nil {
		return n, err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return n, fmt.Errorf("write %s: %w", path, err)
	}
	renamed = true
	if err = SyncDir(dir); err != nil {
		return n, fmt.Errorf("write %s: %w", path, err)
	}
	return n, nil
}

// fileWriter writes to f through write (Options.Write). It hides f's ReadFrom, so that every
// byte goes through write.
type fileWriter struct {
	f     *os.File
	write func(*os.File, []byte) (int, error)
}

func (w fileWriter) Write(b []byte) (int, error) { return w.write(w.f, b) }

// refuseSymlink fails when path is a symbolic link. A missing file is fine.
func refuseSymlink(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("write %s: %w", path, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%s %w", path, ErrSymlink)
	}
	return nil
}

// SyncDir fsyncs directory dir, making renames and creates in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory %s for fsync: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}

// OpenFile is os.OpenFile that never follows a symbolic link at path: a link fails with an error
// wrapping ErrSymlink.
func OpenFile(path string, flag int, perm os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, perm)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s %w", path, ErrSymlink)
	}
	return f, err
}

// ReadFile reads the regular file at path without following a symbolic link (ErrSymlink) and
// without blocking on a FIFO: anything but a regular file fails with an error wrapping
// ErrNotRegular. Other errors are the os errors (fs.ErrNotExist for a missing file).
func ReadFile(path string) ([]byte, error) {
	f, err := OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s %w (%v)", path, ErrNotRegular, fi.Mode().Type())
	}
	return io.ReadAll(f)
}

// CheckWritable proves that dir takes a new file by creating and removing one: permission bits
// alone say nothing about a read-only mount, a full inode table or root's exemptions.
func CheckWritable(dir string) error {
	f, err := os.CreateTemp(dir, ".writable-*")
	if err != nil {
		return fmt.Errorf("%s is not writable: %w", dir, err)
	}
	name := f.Name()
	cerr := f.Close()
	if err := errors.Join(cerr, os.Remove(name)); err != nil {
		return fmt.Errorf("%s: write probe: %w", dir, err)
	}
	return nil
}
