package molecule

// Files back to the chat. The agent sends a file with the send_file tool (package chatfiles)
// while its turn runs; the daemon copies it out of the chat's folder at once, into the inbox's
// outbox under the state directory, so what leaves is what the agent chose, checked when it
// chose it. The copies go with the turn's reply, never before it: to the canvas user as notify
// attachments after a chat/uploads upload, to a peer as A2A file parts with the bytes inline
// (outbound.go). The wire facts are in docs/molecule.md ("Files back to the chat").

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/bridge/molecule/ledger"
	"github.com/molecule-ai/codex-warm/internal/chatfiles"
)

// peerInlineBytes bounds the files of one reply to a peer: they travel base64 inside the A2A
// request, which the platform caps at 16 MiB (a2a_proxy.go maxProxyRequestBody); 11 MiB is
// 14.7 MiB as base64, leaving room for the text.
const peerInlineBytes = 11 << 20

// outboxDirName is where the copies wait for delivery: <StateDir>/outbox/<activity>/<attempt>/.
const outboxDirName = "outbox"

// whyAttemptFailed is why the files an attempt at a message sent do not go when that attempt
// failed and the message was tried again: they were the failed attempt's, and the answer is the
// later one's.
const whyAttemptFailed = "the attempt at this message that sent them failed, and the message was tried again"

// whyLate is why a send_file call that ends after its turn's reply was taken sends nothing: the
// reply that was taken is the one that goes.
const whyLate = "the turn that called send_file has ended: its reply was already taken, or the attempt failed " +
	"and the message is tried again; a file goes only with the reply of the turn that sends it, while that turn runs"

// sendBox collects the files one attempt at a message sends, and the ones refused. Once closed
// (its reply took it, or its attempt failed) it takes no more: a call then is late.
type sendBox struct {
	parent string // the message's folder in the outbox; the attempt's own is made in it

	mu      sync.Mutex
	dir     string // the attempt's folder, made at its first file
	closed  bool
	files   []ledger.SentFile
	refused []string
	bytes   int64
}

// attempts are the send_file boxes of one message: its current attempt's, and the names of the
// files its failed attempts dropped.
type attempts struct {
	cur     *sendBox
	dropped []string
}

// takenFiles is what a message's turn sent, as its reply takes it.
type takenFiles struct {
	files   []ledger.SentFile
	refused []string
	dropped []string // the files of its failed attempts, not sent
}

// close ends b: it takes no more files. It returns what it holds.
func (b *sendBox) close() (files []ledger.SentFile, refused []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return b.files, b.refused
}

// refuse records a refusal the reply is to name (none once b is closed: no reply reads it).
func (b *sendBox) refuse(text string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.refused = append(b.refused, text)
	}
}

// folder is the attempt's folder in the outbox, made at the first call; b.mu is held.
func (b *sendBox) folder() (string, error) {
	if b.dir != "" {
		return b.dir, nil
	}
	if err := os.MkdirAll(b.parent, 0o700); err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp(b.parent, "attempt-")
	if err != nil {
		return "", err
	}
	b.dir = dir
	return dir, nil
}

// add records f, copied; b.mu is held.
func (b *sendBox) add(f ledger.SentFile) {
	b.files = append(b.files, f)
	b.bytes += f.Size
}

// openBox starts an attempt at msg: its own box, which a failed earlier attempt's files never
// enter. An earlier attempt's box still open is dropped (dropAttempt).
func (d *replies) openBox(msg message) *sendBox {
	d.dropAttempt(msg.ActivityID)
	box := &sendBox{parent: filepath.Join(d.cfg.StateDir, outboxDirName, outboxName(msg.ActivityID))}
	d.mu.Lock()
	defer d.mu.Unlock()
	a := d.boxes[msg.ActivityID]
	if a == nil {
		a = &attempts{}
		d.boxes[msg.ActivityID] = a
	}
	a.cur = box
	return box
}

// dropAttempt ends the current attempt at the message activityID as failed: its box is closed,
// its copies leave the outbox, and its files' names are kept for the reply's note. It returns
// those names.
func (d *replies) dropAttempt(activityID string) []string {
	d.mu.Lock()
	a := d.boxes[activityID]
	var box *sendBox
	if a != nil {
		box, a.cur = a.cur, nil
	}
	d.mu.Unlock()
	if box == nil {
		return nil
	}
	files, _ := box.close()
	_ = os.RemoveAll(box.dir)
	if len(files) == 0 {
		return nil
	}
	names := make([]string, 0, len(files))
	for _, f := range files {
		names = append(names, f.Name)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if a := d.boxes[activityID]; a != nil {
		a.dropped = append(a.dropped, names...)
	}
	return names
}

// takeBox returns and forgets what the message activityID's turn sent: its current attempt's
// files and refusals (that box closed: a later call is refused) and the names its failed
// attempts dropped.
func (d *replies) takeBox(activityID string) takenFiles {
	d.mu.Lock()
	a := d.boxes[activityID]
	delete(d.boxes, activityID)
	d.mu.Unlock()
	if a == nil {
		return takenFiles{}
	}
	t := takenFiles{dropped: a.dropped}
	if a.cur != nil {
		t.files, t.refused = a.cur.close()
	}
	return t
}

// sendFileTool is the answer to the send_file calls of one attempt at msg (a box of its own):
// it checks and copies the file at once and tells the model whether it will go.
func (d *replies) sendFileTool(msg message) appserver.ToolHandler {
	box := d.openBox(msg)
	log := d.log.With(zap.String("chat_key", msg.ChatKey), zap.String("activity_id", msg.ActivityID))
	return func(ctx context.Context, call appserver.ToolCall) appserver.ToolResult {
		if call.Tool != chatfiles.ToolName {
			return appserver.ToolResult{Text: "there is no tool " + call.Tool}
		}
		args, err := chatfiles.ParseArgs(call.Arguments)
		if err != nil {
			return appserver.ToolResult{Text: err.Error()}
		}
		f, err := d.takeFile(ctx, log, msg, box, args)
		if err != nil {
			d.c.filesRefused.Add(1)
			log.Warn("file not sent", zap.String("path", args.Path), zap.Error(err), zap.NamedError("cause", errors.Unwrap(err)))
			box.refuse(err.Error())
			return appserver.ToolResult{Text: err.Error()}
		}
		log.Info("file queued for the reply", zap.String("name", f.Name), zap.Int64("size", f.Size))
		return appserver.ToolResult{OK: true, Text: fmt.Sprintf("%s (%d bytes, %s) will be sent with your reply", f.Name, f.Size, f.MimeType)}
	}
}

// takeFile checks the file args names against the chat's folder and the limits of msg's route,
// and copies it to the outbox. Its error is a *chatfiles.Refusal, whose text the model and the
// chat (the canvas user or a peer agent) get: it names the file as the agent wrote it and no path
// of the host's; a failure of the daemon's own is its Err, for the log.
func (d *replies) takeFile(ctx context.Context, log *zap.Logger, msg message, box *sendBox, args chatfiles.Args) (ledger.SentFile, error) {
	refuse := func(why string, cause error) (ledger.SentFile, error) {
		return ledger.SentFile{}, &chatfiles.Refusal{Path: args.Path, Kind: chatfiles.RefusedOther, Reason: why, Err: cause}
	}
	uploads, err := chatUploadDir(d.cfg.WorkDir, msg.ChatKey)
	if err != nil {
		return refuse("this chat has no folder to send files from (the daemon's log says why)", err)
	}
	dir := filepath.Dir(uploads)
	path := chatfiles.FromWorkDir(d.cfg.WorkDir, args.Path)
	up := d.limits(ctx, log)
	box.mu.Lock()
	defer box.mu.Unlock()
	if box.closed {
		return refuse(whyLate, nil)
	}
	lim := chatfiles.Limits{MaxFileBytes: up.PerFile}
	if msg.Route.Kind == routeA2A {
		lim.ReplyBytes, lim.ReplyUsed = peerInlineBytes, box.bytes
	}
	if most := up.MaxAttachments; most > 0 && len(box.files) >= most {
		return refuse(fmt.Sprintf("this reply has %d files already, the most one message takes", len(box.files)), nil)
	}
	outbox, err := box.folder()
	if err != nil {
		return refuse("the outbox cannot be made (the daemon's log says why)", err)
	}
	tmp, err := os.CreateTemp(outbox, ".copy-*")
	if err != nil {
		return refuse("the outbox cannot be written (the daemon's log says why)", err)
	}
	keep := false
	defer func() {
		if !keep {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	info, err := chatfiles.Copy(dir, path, lim, d.secrets(), tmp)
	var r *chatfiles.Refusal
	if errors.As(err, &r) {
		r.Path = args.Path
		if _, byReply := lim.Max(); byReply && r.Kind == chatfiles.RefusedTooLarge {
			r.Reason += " (a peer gets the files of one reply inline, in one request)"
		}
		return ledger.SentFile{}, r
	}
	if err != nil {
		return refuse("it cannot be copied (the daemon's log says why)", err)
	}
	if err := tmp.Sync(); err != nil {
		return refuse("the copy cannot be written (the daemon's log says why)", err)
	}
	if err := tmp.Close(); err != nil {
		return refuse("the copy cannot be written (the daemon's log says why)", err)
	}
	final := filepath.Join(outbox, strconv.Itoa(len(box.files)+1)+"-"+sanitizeFilename(info.Name))
	if err := os.Rename(tmp.Name(), final); err != nil {
		return refuse("the copy cannot be written (the daemon's log says why)", err)
	}
	keep = true
	f := ledger.SentFile{Name: sanitizeFilename(info.Name), MimeType: info.MimeType, Size: info.Size, Caption: args.Caption, Path: final}
	box.add(f)
	return f, nil
}

// outboxName is an activity id as a folder name.
func outboxName(activityID string) string {
	sum := sha256.Sum256([]byte(activityID))
	return hex.EncodeToString(sum[:12])
}

// secrets is every credential the daemon holds (the one secret set the redactor reads too).
func (d *replies) secrets() chatfiles.Secrets { return d.red.set }

// withFiles returns text with t's refusals added (the chat reads why) and the files of failed
// attempts named as not sent, and t's files.
func withFiles(t takenFiles, text string) (string, []ledger.SentFile) {
	for _, r := range t.refused {
		text += "\n\n[" + r + "]"
	}
	if len(t.dropped) > 0 {
		text += "\n\n" + chatfiles.NotSent(t.dropped, whyAttemptFailed)
	}
	return text, t.files
}

// withoutFiles returns text naming files as not sent (why), for a reply that does not carry them.
func withoutFiles(text string, files []ledger.SentFile, why string) string {
	if len(files) == 0 {
		return text
	}
	names := make([]string, 0, len(files))
	for _, f := range files {
		names = append(names, f.Name)
	}
	return text + "\n\n" + chatfiles.NotSent(names, why)
}

// sweepOutbox deletes, at start, whatever the outbox holds that no pending reply lists: the
// copies of a turn a crash cut off, of a send_file that ended after its reply was taken (older
// versions kept it), of a failed attempt. Nothing else writes there yet.
func (d *replies) sweepOutbox(log *zap.Logger) {
	root := filepath.Join(d.cfg.StateDir, outboxDirName)
	keep := make(map[string]bool)
	for _, p := range d.ledger.PendingFiles() {
		// A kept file keeps the folders above it.
		for p = filepath.Clean(p); p != root && len(p) > len(root); p = filepath.Dir(p) {
			keep[p] = true
		}
	}
	var swept []string
	err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil
		case err != nil:
			return err
		case path == root || keep[path]:
			return nil
		}
		if err := os.RemoveAll(path); err != nil {
			return err
		}
		swept = append(swept, path)
		if e.IsDir() {
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		log.Warn("the outbox could not be swept of copies no pending reply lists", zap.Error(err))
	}
	if len(swept) > 0 {
		log.Info("outbox swept of copies no pending reply lists", zap.Int("entries", len(swept)))
	}
}

// removeOutbox deletes the copies of a reply that is done with.
func (d *replies) removeOutbox(activityID string) {
	_ = os.RemoveAll(filepath.Join(d.cfg.StateDir, outboxDirName, outboxName(activityID)))
}
