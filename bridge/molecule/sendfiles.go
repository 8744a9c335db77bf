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

// outboxDirName is where the copies wait for delivery: <StateDir>/outbox/<activity>/.
const outboxDirName = "outbox"

// sendBox collects the files one message's turn sends, and the ones refused.
type sendBox struct {
	mu      sync.Mutex
	files   []ledger.SentFile
	refused []string
	bytes   int64
}

// takeBox returns and forgets the files msg's turn sent (nil when it sent none).
func (d *replies) takeBox(activityID string) *sendBox {
	d.mu.Lock()
	defer d.mu.Unlock()
	b := d.boxes[activityID]
	delete(d.boxes, activityID)
	return b
}

// sendFileTool is msg's answer to send_file calls: it checks and copies the file at once and
// tells the model whether it will go.
func (d *replies) sendFileTool(msg message) appserver.ToolHandler {
	d.mu.Lock()
	box := d.boxes[msg.ActivityID]
	if box == nil {
		box = &sendBox{}
		d.boxes[msg.ActivityID] = box
	}
	d.mu.Unlock()
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
			box.mu.Lock()
			box.refused = append(box.refused, err.Error())
			box.mu.Unlock()
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
	lim := chatfiles.Limits{MaxFileBytes: up.PerFile}
	if msg.Route.Kind == routeA2A {
		lim.ReplyBytes, lim.ReplyUsed = peerInlineBytes, box.bytes
	}
	if most := up.MaxAttachments; most > 0 && len(box.files) >= most {
		return refuse(fmt.Sprintf("this reply has %d files already, the most one message takes", len(box.files)), nil)
	}
	outbox := filepath.Join(d.cfg.StateDir, outboxDirName, outboxName(msg.ActivityID))
	if err := os.MkdirAll(outbox, 0o700); err != nil {
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
	box.files = append(box.files, f)
	box.bytes += f.Size
	return f, nil
}

// outboxName is an activity id as a folder name.
func outboxName(activityID string) string {
	sum := sha256.Sum256([]byte(activityID))
	return hex.EncodeToString(sum[:12])
}

// secrets is every credential the daemon holds (the one secret set the redactor reads too).
func (d *replies) secrets() chatfiles.Secrets { return d.red.set }

// withFiles returns text with box's refusals added (the chat reads why), and box's files.
func withFiles(box *sendBox, text string) (string, []ledger.SentFile) {
	if box == nil {
		return text, nil
	}
	box.mu.Lock()
	defer box.mu.Unlock()
	for _, r := range box.refused {
		text += "\n\n[" + r + "]"
	}
	return text, box.files
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

// removeOutbox deletes the copies of a reply that is done with.
func (d *replies) removeOutbox(activityID string) {
	_ = os.RemoveAll(filepath.Join(d.cfg.StateDir, outboxDirName, outboxName(activityID)))
}
