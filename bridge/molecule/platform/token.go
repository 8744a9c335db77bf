package platform

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/atomicfile"
	"github.com/molecule-ai/codex-warm/internal/secretset"
)

// TokenFileName is the workspace token's file in the configs directory, where the platform
// writes it and rotates it, and where the Molecule runtime saves a token register issued
// (molecule_runtime/platform_auth.py).
const TokenFileName = ".auth_token"

// maxTokenFile bounds what is read of the token file: a token is a few dozen bytes.
const maxTokenFile = 4 << 10

// tokenSource is the workspace token in use. The token rotates in its file
// (<configs>/.auth_token): once the file holds another token, that one is used. Every platform
// call asks for the token; the file is stat'ed then and read only when it changed, and it is
// read again after a 401 whatever its stat says. A token register issues is saved there, as the
// runtime does.
type tokenSource struct {
	path string // "" when there is no token file (the token came from the environment only)
	// used is the daemon's secret set: every token taken into use goes there, so the redactor
	// removes old ones too and a file holding one is never sent.
	used *secretset.Set

	mu    sync.Mutex
	token string
	stamp fileStamp // the file when it was last read
	log   *zap.Logger
}

// fileStamp says whether a file may have changed since it was read.
type fileStamp struct {
	size  int64
	mtime time.Time
	ino   uint64
}

func stampOf(fi os.FileInfo) fileStamp {
	st := fileStamp{size: fi.Size(), mtime: fi.ModTime()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = sys.Ino
	}
	return st
}

func newTokenSource(token, path string, used *secretset.Set) *tokenSource {
	s := &tokenSource{path: path, used: used, token: token, log: zap.NewNop()}
	if path != "" {
		if fi, err := os.Stat(path); err == nil {
			// The start token was read from this file or chosen over it: a rotation is a
			// change after now.
			s.stamp = stampOf(fi)
		}
	}
	return s
}

// current returns the token to send, switching to the file's token when the file changed.
func (s *tokenSource) current() string {
	if s.path == "" {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.token
	}
	fi, err := os.Stat(s.path)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && stampOf(fi) != s.stamp {
		s.readLocked(stampOf(fi), "changed")
	}
	return s.token
}

// reload reads the file again (after a 401) and reports whether it holds a token other than
// the one in use, which is then used.
func (s *tokenSource) reload() bool {
	if s.path == "" {
		return false
	}
	fi, err := os.Stat(s.path)
	if err != nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readLocked(stampOf(fi), "re-read after a 401")
}

// readLocked reads the file and takes its token when it differs from the one in use. A file
// that is missing, empty or not one line keeps the token in use.
func (s *tokenSource) readLocked(st fileStamp, why string) bool {
	s.stamp = st
	t, err := ReadTokenFile(s.path)
	if err != nil || t == "" || t == s.token {
		return false
	}
	s.token = t
	s.used.Add(secretset.WorkspaceToken, t)
	s.log.Info("workspace token rotated: the token file holds a new token; using it",
		zap.String("token_file", s.path), zap.String("why", why))
	return true
}

// save stores a token register issued in the file (atomically, mode 0600) and uses it. Without
// a file it is used for this run only.
func (s *tokenSource) save(token string) error {
	s.used.Add(secretset.WorkspaceToken, token)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.token = token
	if s.path == "" {
		return errors.New("no configs directory to save it in: it is used until the daemon stops")
	}
	if err := os.MkdirAll(filepath.Dir(s.path), 0o700); err != nil {
		return fmt.Errorf("save workspace token: %w", err)
	}
	if err := atomicfile.WriteFile(s.path, []byte(token), atomicfile.Options{Perm: 0o600}); err != nil {
		return fmt.Errorf("save workspace token: %w", err)
	}
	if fi, err := os.Stat(s.path); err == nil {
		s.stamp = stampOf(fi)
	}
	return nil
}

// ReadTokenFile reads a token file: one line, surrounding space trimmed. "" with a nil error
// means the file is missing or empty. Errors name the file but never its content.
func ReadTokenFile(path string) (string, error) {
	// Links are followed (a mounted secret is usually one); O_NONBLOCK keeps a FIFO planted
	// there from blocking the daemon, and only a regular file is read.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", nil
		}
		return "", fmt.Errorf("read workspace token file %s: %w", path, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("workspace token file %s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	if err != nil {
		return "", fmt.Errorf("read workspace token file %s: %w", path, err)
	}
	if len(b) > maxTokenFile {
		return "", fmt.Errorf("workspace token file %s is over %d bytes", path, maxTokenFile)
	}
	t := strings.TrimSpace(string(b))
	if strings.ContainsAny(t, "\r\n") {
		return "", fmt.Errorf("workspace token file %s has more than one line", path)
	}
	return t, nil
}
