package chatfiles_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/molecule-ai/codex-warm/internal/chatfiles"
)

func writeUpload(t *testing.T, work, chat, name string, age time.Duration) string {
	t.Helper()
	dir := filepath.Join(chatfiles.Folder(work, chat), chatfiles.UploadsDirName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("12345"), 0o600); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-age)
	if err := os.Chtimes(p, at, at); err != nil {
		t.Fatal(err)
	}
	return p
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// Uploads older than the cutoff go, newer ones stay; the chat's other files are never touched;
// a symbolic link an agent put in an uploads folder is removed, its target kept.
func TestPruneUploads(t *testing.T) {
	work := t.TempDir()
	old := writeUpload(t, work, "canvas:a", "f1-old.pdf", 40*24*time.Hour)
	fresh := writeUpload(t, work, "canvas:a", "f2-new.pdf", time.Hour)
	oldB := writeUpload(t, work, "peer:b", "f3-old.txt", 31*24*time.Hour)
	own := filepath.Join(chatfiles.Folder(work, "canvas:a"), "report.pdf")
	if err := os.WriteFile(own, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(outside, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(filepath.Dir(oldB), "link")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-50 * 24 * time.Hour)
	tv := unix.NsecToTimeval(past.UnixNano())
	if err := unix.Lutimes(link, []unix.Timeval{tv, tv}); err != nil {
		t.Fatal(err)
	}
	rm, err := chatfiles.PruneUploads(work, time.Now().Add(-30*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if rm.Files != 3 || rm.Bytes != 10 {
		t.Errorf("removed %+v, want 3 files (two of 5 bytes and a link)", rm)
	}
	if exists(old) || exists(oldB) || exists(link) || !exists(fresh) || !exists(own) || !exists(outside) {
		t.Fatalf("after pruning: old %v oldB %v link %v fresh %v own %v outside %v",
			exists(old), exists(oldB), exists(link), exists(fresh), exists(own), exists(outside))
	}
}

// RemoveUploads removes one chat's uploads folder and nothing else; an uploads "folder" that is
// a link to somewhere else is left alone.
func TestRemoveUploads(t *testing.T) {
	work := t.TempDir()
	a := writeUpload(t, work, "canvas:a", "f1.pdf", 0)
	b := writeUpload(t, work, "peer:b", "f2.pdf", 0)
	rm, err := chatfiles.RemoveUploads(work, "canvas:a")
	if err != nil || rm.Files != 1 {
		t.Fatalf("%+v %v", rm, err)
	}
	if exists(filepath.Dir(a)) || !exists(b) || !exists(chatfiles.Folder(work, "canvas:a")) {
		t.Fatal("wrong things removed")
	}
	target := t.TempDir()
	if err := os.WriteFile(filepath.Join(target, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c := chatfiles.Folder(work, "peer:c")
	if err := os.MkdirAll(c, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(c, chatfiles.UploadsDirName)); err != nil {
		t.Fatal(err)
	}
	if _, err := chatfiles.RemoveUploads(work, "peer:c"); err != nil {
		t.Fatal(err)
	}
	if !exists(filepath.Join(target, "x")) {
		t.Fatal("followed a link out of the chat's folder")
	}
	if rm, err := chatfiles.RemoveUploads(t.TempDir(), "none"); err != nil || rm.Files != 0 {
		t.Fatalf("no .chats: %+v %v", rm, err)
	}
}
