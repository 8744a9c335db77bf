package chatfiles

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// UploadsDirName is the folder of a chat's folder where the files its users sent are saved
// (inbox/molecule): <workDir>/.chats/<chat>/uploads/.
const UploadsDirName = "uploads"

// Removed counts what a prune removed.
type Removed struct {
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
}

// RemoveUploads removes chatKey's uploads folder and everything in it. Its agent's own files in
// the chat's folder stay. Everything is removed through an os.Root on the working directory's
// .chats folder, so a symbolic link an agent left there is removed, never followed.
func RemoveUploads(workDir, chatKey string) (Removed, error) {
	return prune(workDir, []string{DirName(chatKey)}, time.Time{}, true)
}

// PruneUploads removes, in every chat's uploads folder, the files last modified before cutoff.
func PruneUploads(workDir string, cutoff time.Time) (Removed, error) {
	chats, err := os.ReadDir(filepath.Join(workDir, ChatsDirName))
	if errors.Is(err, fs.ErrNotExist) {
		return Removed{}, nil
	}
	if err != nil {
		return Removed{}, fmt.Errorf("prune uploads: %w", err)
	}
	var names []string
	for _, c := range chats {
		if c.IsDir() {
			names = append(names, c.Name())
		}
	}
	return prune(workDir, names, cutoff, false)
}

// prune removes, in each of the chat folders named, the uploads older than cutoff (all: every
// one, and the folder).
func prune(workDir string, chats []string, cutoff time.Time, all bool) (Removed, error) {
	var rm Removed
	root, err := os.OpenRoot(filepath.Join(workDir, ChatsDirName))
	if errors.Is(err, fs.ErrNotExist) {
		return rm, nil
	}
	if err != nil {
		return rm, fmt.Errorf("prune uploads: %w", err)
	}
	defer root.Close()
	var errs []error
	for _, chat := range chats {
		dir := filepath.Join(chat, UploadsDirName)
		fi, err := root.Lstat(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !fi.IsDir() {
			// Not ours: the daemon makes a folder here and saves nothing through a link.
			continue
		}
		f, err := root.Open(dir)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		entries, err := f.ReadDir(-1)
		f.Close()
		if err != nil {
			errs = append(errs, err)
		}
		for _, e := range entries {
			info, err := e.Info()
			if err != nil {
				continue
			}
			if !all && !info.ModTime().Before(cutoff) {
				continue
			}
			if err := root.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				errs = append(errs, err)
				continue
			}
			rm.Files++
			if info.Mode().IsRegular() {
				rm.Bytes += info.Size()
			}
		}
		if all {
			if err := root.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return rm, fmt.Errorf("prune uploads under %s: %w", filepath.Join(workDir, ChatsDirName), err)
	}
	return rm, nil
}
