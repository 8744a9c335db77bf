// Package atomicfile replaces the daemon's state files (sessions.json, bridge-state.json,
// children.json) atomically and durably: a temp file in the same directory is written, fsynced
// and renamed over the target, and then the directory is fsynced, because the rename itself is
// only durable once the directory entry is on disk. A crash leaves either the old or the new
// file.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
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
func WriteFile(path string, data []byte, opt Options) (err error) {
	if opt.Perm == 0 {
		opt.Perm = DefaultPerm
	}
	if opt.Write == nil {
		opt.Write = (*os.File).Write
	}
	if opt.Sync == nil {
		opt.Sync = (*os.File).Sync
	}
	dir := filepath.Dir(path)
	// CreateTemp opens with O_EXCL (which never follows a link) and mode 0600.
	tmp, err := os.CreateTemp(dir, TempPrefix(filepath.Base(path))+"*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	renamed := false
	defer func() {
		if err != nil && !renamed {
			_ = tmp.Close() // may already be closed; the first error is what matters
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err = opt.Write(tmp, data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if opt.Perm != 0o600 {
		if err = tmp.Chmod(opt.Perm); err != nil {
			return fmt.Errorf("write %s: chmod: %w", path, err)
		}
	}
	if err = opt.Sync(tmp); err != nil {
		return fmt.Errorf("write %s: fsync: %w", path, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("write %s: close: %w", path, err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	renamed = true
	if err = SyncDir(dir); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
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
