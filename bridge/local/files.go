package local

// Files back to the chat on the local inbox: the agent's send_file calls (package chatfiles) are
// answered for the message's own turn, and the files go inline (base64) in the reply's JSON, and
// so in the event stream's reply event, up to Config.MaxFileBytes for all of one reply.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/chatfiles"
)

// DefaultMaxFileBytes bounds the files of one reply, inline in its JSON.
const DefaultMaxFileBytes = 8 << 20

// DefaultMaxFiles bounds how many files one reply carries.
const DefaultMaxFiles = 10

// File is a file the agent sent with the reply.
type File struct {
	Name     string `json:"name"`
	MimeType string `json:"mime_type"`
	Size     int64  `json:"size"`
	Caption  string `json:"caption,omitempty"`
	// Data is the content (base64 in JSON).
	Data []byte `json:"data"`
}

// fileBox collects the files one message's turn sends, and the refusals.
type fileBox struct {
	mu      sync.Mutex
	files   []File
	refused []string
	bytes   int64
}

// sendFileTool answers send_file for one message of chatKey; nil when the inbox sends no files
// (no working directory).
func (h *Inbox) sendFileTool(chatKey string, box *fileBox, log *zap.Logger) appserver.ToolHandler {
	if h.cfg.WorkDir == "" {
		return nil
	}
	dir := chatfiles.Folder(h.cfg.WorkDir, chatKey)
	return func(_ context.Context, call appserver.ToolCall) appserver.ToolResult {
		if call.Tool != chatfiles.ToolName {
			return appserver.ToolResult{Text: "there is no tool " + call.Tool}
		}
		args, err := chatfiles.ParseArgs(call.Arguments)
		if err != nil {
			return appserver.ToolResult{Text: err.Error()}
		}
		box.mu.Lock()
		defer box.mu.Unlock()
		f, err := h.takeFile(dir, box, args)
		if err != nil {
			h.refused.Add(1)
			box.refused = append(box.refused, err.Error())
			log.Warn("file not sent", zap.String("path", args.Path), zap.Error(err), zap.NamedError("cause", errors.Unwrap(err)))
			return appserver.ToolResult{Text: err.Error()}
		}
		box.files = append(box.files, f)
		box.bytes += f.Size
		log.Info("file queued for the reply", zap.String("name", f.Name), zap.Int64("size", f.Size))
		return appserver.ToolResult{OK: true, Text: fmt.Sprintf("%s (%d bytes, %s) will be sent with your reply", f.Name, f.Size, f.MimeType)}
	}
}

// takeFile checks and reads the file args names; box.mu is held. Its error is a
// *chatfiles.Refusal, whose text the model and the chat get: it names the file as the agent
// wrote it and no path of the host's.
func (h *Inbox) takeFile(dir string, box *fileBox, args chatfiles.Args) (File, error) {
	if len(box.files) >= h.cfg.MaxFiles {
		return File{}, &chatfiles.Refusal{Path: args.Path, Kind: chatfiles.RefusedOther, Reason: fmt.Sprintf("this reply has %d files already, the most one reply takes", len(box.files))}
	}
	// MaxFileBytes is the reply's budget; no one file may be larger than all of it.
	lim := chatfiles.Limits{MaxFileBytes: h.cfg.MaxFileBytes, ReplyBytes: h.cfg.MaxFileBytes, ReplyUsed: box.bytes}
	var buf bytes.Buffer
	info, err := chatfiles.Copy(dir, chatfiles.FromWorkDir(h.cfg.WorkDir, args.Path), lim, h.cfg.Secrets, &buf)
	var r *chatfiles.Refusal
	if errors.As(err, &r) {
		// Copy names the path it was given, which FromWorkDir may have made absolute.
		r.Path = args.Path
		return File{}, r
	}
	if err != nil {
		return File{}, &chatfiles.Refusal{Path: args.Path, Kind: chatfiles.RefusedOther, Reason: "it cannot be read (the daemon's log says why)", Err: err}
	}
	return File{Name: info.Name, MimeType: info.MimeType, Size: info.Size, Caption: args.Caption, Data: buf.Bytes()}, nil
}

// take returns the box's files and its refusals added to text.
func (b *fileBox) take(text string) (string, []File) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range b.refused {
		text += "\n\n[" + r + "]"
	}
	return text, b.files
}

// whyErrorAnswer is why the files of a turn answered with an error (504, 500, ...) do not go.
const whyErrorAnswer = "the turn ended in an error"

// withoutFiles returns text naming files as not sent (why), for an answer that does not carry
// them.
func withoutFiles(text string, files []File, why string) string {
	if len(files) == 0 {
		return text
	}
	names := make([]string, 0, len(files))
	for _, f := range files {
		names = append(names, f.Name)
	}
	return text + "\n\n" + chatfiles.NotSent(names, why)
}

// FileStats count the files the agents sent with replies and the ones refused.
type FileStats struct {
	Sent    int64 `json:"files_sent"`
	Refused int64 `json:"files_refused"`
}

// Files returns the inbox's file counts.
func (h *Inbox) Files() FileStats {
	return FileStats{Sent: h.sent.Load(), Refused: h.refused.Load()}
}
