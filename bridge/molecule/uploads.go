package molecule

// Files a canvas user uploads. The platform stages each as a pending upload, writes an activity
// row of its own for it (method chat_upload_receive, never answered: inbound.Normalize skips it), and the
// canvas's message then names it in a file part by platform-pending:<ws>/<file_id> URI, without
// bytes (workspace-server internal/handlers/chat_files.go uploadPollMode; canvas useChatSend.ts).
// The message's worker fetches them just before its turn (takeUploads): an image codex can see
// goes with the message as an image, like an inline one; any other file is saved in the chat's
// own folder under the working directory and its path is told in the message's text. Each file
// is acknowledged once it is taken, never before. What is not taken is told to codex in the
// attachment note and to the chat with the reply (message.Notices).

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/bridge/chat"
	"github.com/molecule-ai/codex-warm/bridge/molecule/inbound"
	"github.com/molecule-ai/codex-warm/bridge/molecule/platform"
	"github.com/molecule-ai/codex-warm/internal/atomicfile"
	"github.com/molecule-ai/codex-warm/internal/chatfiles"
)

// Where uploads are saved: <WorkDir>/chatsDirName/<chat>/uploadsDirName/<file_id>-<name>.
const (
	chatsDirName   = ".chats"
	uploadsDirName = "uploads"
)

// uploadState is what the inbox keeps about uploads across messages.
type uploadState struct {
	mu sync.Mutex
	// asked are the platform's limits once read (GET /uploads/limits); nil until then.
	asked *platform.UploadLimits
}

// limits are the platform's upload limits, lowered to the daemon's own. The platform is asked
// once; while it cannot be asked, the daemon's own limits (the platform's defaults) apply and
// the next message asks again.
func (d *replies) limits(ctx context.Context, log *zap.Logger) platform.UploadLimits {
	own := platform.UploadLimits{PerFile: d.cfg.MaxUploadBytes, PerMessage: d.cfg.MaxUploadsBytes, MaxAttachments: d.cfg.MaxAttachments}
	d.uploads.mu.Lock()
	defer d.uploads.mu.Unlock()
	if d.uploads.asked == nil {
		p, err := d.client.UploadLimits(ctx)
		if err != nil {
			log.Info("the platform's upload limits could not be read; the daemon's own apply", zap.Error(err))
			return own
		}
		d.uploads.asked = &p
	}
	p := *d.uploads.asked
	lower := func(own, platform int64) int64 {
		if platform > 0 {
			return min(own, platform)
		}
		return own
	}
	own.PerFile = lower(own.PerFile, p.PerFile)
	own.PerMessage = lower(own.PerMessage, p.PerMessage)
	own.MaxAttachments = int(lower(int64(own.MaxAttachments), int64(p.MaxAttachments)))
	return own
}

// takeUploads fetches the files msg names by platform-pending: URI, in order, and returns msg
// with its images, its text (the attachment note saying what became of each file, with the
// paths of saved ones) and its notices. A file the platform cannot give now (5xx, 429, 401, the
// network, a body too slow) is tried again with backoff while the message stays unacknowledged;
// ok is false when ctx ended first. A file that cannot be taken (refused by a limit, gone,
// redirected, not a real image, not savable) is named in the notices and the rest of the message
// goes on. nothing reports a message left with nothing to answer: no text, no other attachment,
// and none of its files taken.
func (d *replies) takeUploads(ctx context.Context, log *zap.Logger, msg message) (_ message, nothing, ok bool) {
	lim := d.limits(ctx, log)
	t := uploadTake{budget: d.cfg.MaxImagesBytes - decodedImageBytes(msg.Images)}
	// The attachment slice is the message's own from here: the queued job keeps its copy.
	msg.Attachments = append([]inbound.Attachment(nil), msg.Attachments...)
	for _, up := range msg.Uploads {
		var why string
		var taken bool
		switch {
		case up.Refused != "":
			why = up.Refused
		case t.count >= lim.MaxAttachments:
			why = fmt.Sprintf("not taken: the message names %d files, and %d are taken from one message", len(msg.Uploads), lim.MaxAttachments)
		default:
			t.count++
			var err error
			why, taken, err = d.takeUpload(ctx, log.With(zap.String("file_id", up.FileID)), &msg, up, lim, &t)
			if err != nil {
				return msg, false, false
			}
		}
		if taken {
			t.taken++
		}
		msg.Attachments[up.Att].Why = why
		if !taken {
			log.Info("uploaded file not taken", zap.String("file_id", up.FileID), zap.String("reason", why))
			msg.Notices = append(msg.Notices, chat.Truncate(strings.Join(strings.Fields(up.Name), " "), inbound.MaxAttachmentNameLen, "name")+": "+why)
		}
	}
	msg.Text, _ = inbound.ComposeText(msg.Body, msg.Attachments, d.cfg.MaxTextBytes)
	nothing = t.taken == 0 && strings.TrimSpace(msg.Body) == "" && len(msg.Attachments) == len(msg.Uploads) && len(msg.Images) == 0
	msg.Uploads, msg.Body = nil, ""
	return msg, nothing, true
}

// uploadTake is what the files of one message have used so far.
type uploadTake struct {
	count  int   // files fetched or tried
	taken  int   // files taken
	bytes  int64 // bytes taken
	budget int   // image bytes the message may still show (MaxImagesBytes)
}

// decodedImageBytes is about how many bytes the data URL images hold once decoded.
func decodedImageBytes(images []string) int {
	n := 0
	for _, u := range images {
		if _, payload, ok := strings.Cut(u, ","); ok {
			n += base64.StdEncoding.DecodedLen(len(payload))
		}
	}
	return n
}

// takeUpload fetches one file and takes it: an image of a type codex is shown into msg.Images,
// any other file into the chat's folder. It returns what became of it for the attachment note
// and whether it was taken; err only when ctx ended.
func (d *replies) takeUpload(ctx context.Context, log *zap.Logger, msg *message, up upload, lim platform.UploadLimits, t *uploadTake) (why string, taken bool, err error) {
	image := inbound.ImageTypes[up.MimeType]
	limit := lim.PerFile
	if image {
		limit = min(limit, int64(min(d.cfg.MaxImageBytes, t.budget)))
	}
	left := lim.PerMessage - t.bytes
	switch {
	case image && up.Size > limit:
		return inbound.OverCap(int(min(up.Size, 1<<40)), d.ncfg), false, nil
	case up.Size > limit:
		return fmt.Sprintf("not taken: %s, over the %s limit for one file", sizeText(up.Size), sizeText(limit)), false, nil
	case up.Size > left:
		return fmt.Sprintf("not taken: with it the message's files pass the %s limit for one message", sizeText(lim.PerMessage)), false, nil
	}
	limit = min(limit, left)

	var data []byte
	var path string
	var n int64
	fetch := func() error {
		if image {
			return d.client.FetchUpload(ctx, up.FileID, limit, d.cfg.UploadTimeout, func(r io.Reader) error {
				var err error
				data, err = io.ReadAll(r)
				n = int64(len(data))
				return err
			})
		}
		var err error
		path, n, err = d.saveUpload(ctx, msg.ChatKey, up, limit)
		return err
	}
	err = platform.RetryForever(ctx, d.cfg.RetryInitial, d.cfg.RetryMax, func() error {
		err := fetch()
		if err != nil && !transientUploadError(err) {
			return backoff.Permanent(err)
		}
		return err
	}, func(err error, wait time.Duration) {
		log.Warn("uploaded file could not be fetched; the message stays unacknowledged and it is tried again",
			zap.Error(err), zap.Duration("retry_in", wait))
	})
	if ctx.Err() != nil {
		return "", false, ctx.Err()
	}
	if err != nil {
		return d.uploadRefusal(log, err, image), false, nil
	}
	t.bytes += n
	if image {
		url, refused := inbound.ImageURL(up.MimeType, data, d.ncfg, &t.budget)
		if url == "" {
			return refused, false, nil
		}
		if !d.images.reserve(int64(len(url))) {
			return fmt.Sprintf("image not shown: the images of messages waiting for an answer already fill the daemon's %.1f MiB", float64(d.images.max)/(1<<20)), false, nil
		}
		msg.Images = append(msg.Images, url)
		why = "image"
	} else {
		why = "saved as " + path
	}
	// Taken: now, and only now, the platform may let it go.
	if err := d.client.AckUpload(ctx, up.FileID); err != nil && ctx.Err() == nil {
		log.Warn("uploaded file taken but its ack failed; the platform lets it go after its TTL", zap.Error(err))
	}
	log.Info("uploaded file taken", zap.Int64("bytes", n), zap.Bool("image", image))
	return why, true, nil
}

// transientUploadError says whether a failed fetch may work when tried again: the network, a
// body cut off or too slow, 408, 429, 5xx, and 401 (a token the operator can fix, as for
// replies). Everything else (404 and 410: the upload expired or is gone; 3xx; other 4xx; over a
// limit; the disk) is final for that file.
func transientUploadError(err error) bool {
	var he *platform.HTTPError
	var tl *platform.TooLargeError
	var se *saveError
	var be *platform.BodyError
	switch {
	case errors.As(err, &tl), errors.As(err, &se):
		return false
	case errors.As(err, &be):
		return true
	case errors.As(err, &he):
		return platform.RetryableStatus(he.Status) || he.Status == http.StatusUnauthorized
	}
	return true
}

// uploadRefusal is what the chat is told of a file that could not be taken because of err.
func (d *replies) uploadRefusal(log *zap.Logger, err error, image bool) string {
	var he *platform.HTTPError
	var tl *platform.TooLargeError
	var se *saveError
	switch {
	case errors.As(err, &tl) && image:
		return inbound.OverCap(int(min(tl.Size, 1<<40)), d.ncfg)
	case errors.As(err, &tl):
		return fmt.Sprintf("not taken: more than the %s limit for it", sizeText(tl.Limit))
	case errors.As(err, &se):
		log.Error("uploaded file could not be saved in the working directory", zap.Error(err))
		return "could not be saved in the working directory"
	case errors.As(err, &he) && (he.Status == http.StatusNotFound || he.Status == http.StatusGone):
		log.Warn("uploaded file is gone from the platform", zap.Error(err))
		return fmt.Sprintf("could not be fetched: the upload has expired or is gone (HTTP %d)", he.Status)
	case errors.As(err, &he) && he.Redirect():
		log.Warn("uploaded file's content answered with a redirect; not followed", zap.Error(err))
		return "could not be fetched: the platform answered with a redirect, which is not followed"
	case errors.As(err, &he):
		log.Warn("uploaded file refused by the platform", zap.Error(err))
		return fmt.Sprintf("could not be fetched: the platform answered HTTP %d", he.Status)
	}
	log.Warn("uploaded file could not be fetched", zap.Error(err))
	return "could not be fetched"
}

// sizeText is a byte count for people.
func sizeText(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// saveError is a file that could not be written to the chat's folder.
type saveError struct{ err error }

func (e *saveError) Error() string { return "save upload: " + e.err.Error() }
func (e *saveError) Unwrap() error { return e.err }

// saveUpload fetches up into the chat's folder, at most limit bytes, and returns its path and
// size. The file is written whole or not at all (a temp file renamed), mode 0600. A file an
// earlier try of the same message saved (the same file id in the same chat) is taken as it is.
func (d *replies) saveUpload(ctx context.Context, chatKey string, up upload, limit int64) (string, int64, error) {
	dir, err := chatUploadDir(d.cfg.WorkDir, chatKey)
	if err != nil {
		return "", 0, &saveError{err}
	}
	path := filepath.Join(dir, up.FileID+"-"+sanitizeFilename(up.Name))
	if fi, err := os.Lstat(path); err == nil && fi.Mode().IsRegular() {
		return path, fi.Size(), nil
	}
	var n int64
	err = d.client.FetchUpload(ctx, up.FileID, limit, d.cfg.UploadTimeout, func(r io.Reader) error {
		var err error
		n, err = atomicfile.WriteFrom(path, r, atomicfile.Options{Perm: 0o600})
		var be *platform.BodyError
		var tl *platform.TooLargeError
		if err != nil && !errors.As(err, &be) && !errors.As(err, &tl) {
			return &saveError{err}
		}
		return err
	})
	return path, n, err
}

// chatUploadDir makes (mode 0700) and returns the folder where chatKey's uploads are saved:
// <workDir>/.chats/<chat>/uploads. Each chat has its own, so a file is only ever named to the
// chat it was sent in; a folder on the way that is a symbolic link (or not a folder) is refused,
// not followed.
func chatUploadDir(workDir, chatKey string) (string, error) {
	if workDir == "" {
		return "", errors.New("no working directory to save uploads in")
	}
	chats := filepath.Join(workDir, chatsDirName)
	dir := filepath.Join(chats, chatDirName(chatKey), uploadsDirName)
	for _, d := range []string{chats, filepath.Dir(dir), dir} {
		if err := mkdirPrivate(d); err != nil {
			return "", err
		}
	}
	// The agent's own repository, if the working directory is one, should not take the
	// users' files into a commit.
	ignore := filepath.Join(chats, ".gitignore")
	if _, err := os.Lstat(ignore); errors.Is(err, fs.ErrNotExist) {
		_ = atomicfile.WriteFile(ignore, []byte("*\n"), atomicfile.Options{Perm: 0o600})
	}
	return dir, nil
}

// mkdirPrivate makes directory d with mode 0700, or checks that it is a directory (not a link)
// and narrows its mode to 0700.
func mkdirPrivate(d string) error {
	if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	fi, err := os.Lstat(d)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory (%v); uploads are not saved through it", d, fi.Mode().Type())
	}
	if fi.Mode().Perm() != 0o700 {
		return os.Chmod(d, 0o700)
	}
	return nil
}

// unsafeNameChars are the characters a saved name may not have: the platform's
// SanitizeFilename rule (chat_files.go), which the runtime shares.
var unsafeNameChars = regexp.MustCompile(`[^a-zA-Z0-9._\-]`)

// maxSavedNameLen caps a saved file's name after its file id, as the platform does.
const maxSavedNameLen = 100

// sanitizeFilename is the platform's SanitizeFilename: the last path element, spaces and every
// character outside [a-zA-Z0-9._-] as '_', at most 100 bytes keeping a short extension, and
// "file" for nothing, "." or "..". Saved after "<file_id>-", the name never starts a path
// element of its own.
func sanitizeFilename(name string) string {
	base := filepath.Base(name)
	base = unsafeNameChars.ReplaceAllString(base, "_")
	if len(base) > maxSavedNameLen {
		ext := ""
		if dot := strings.LastIndex(base, "."); dot >= 0 && len(base)-dot <= 16 {
			ext = base[dot:]
		}
		base = base[:maxSavedNameLen-len(ext)] + ext
	}
	if base == "" || base == "." || base == ".." {
		return "file"
	}
	return base
}

// chatDirName is a chat key as a folder name (chatfiles.DirName: the folder files are sent from
// too).
func chatDirName(chatKey string) string { return chatfiles.DirName(chatKey) }
