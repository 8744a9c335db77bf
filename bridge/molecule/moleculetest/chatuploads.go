package moleculetest

// Files back to the chat as the platform takes them from a poll-mode workspace
// (workspace-server internal/handlers/chat_files.go Upload → uploadPollMode): the workspace
// posts multipart `files` to POST /workspaces/{ws}/chat/uploads, each file is staged as a
// pending upload (platform-pending: URI) with a chat_upload_receive row in the workspace's OWN
// activity feed, and the answer is {"files":[{uri,name,mimeType,size}]}. The workspace then names
// the URIs in a notify's attachments (handlers/activity.go NotifyAttachment). A peer gets files
// as A2A file parts instead.

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"regexp"
	"slices"
	"strings"
)

// RouteChatUpload is POST /workspaces/{ws}/chat/uploads.
const RouteChatUpload Route = "chat-upload"

// Attachment is one notify attachment (handlers/activity.go NotifyAttachment).
type Attachment struct {
	URI      string `json:"uri"`
	Name     string `json:"name"`
	MimeType string `json:"mimeType,omitempty"`
	Size     int64  `json:"size,omitempty"`
}

// A2AFile is an A2A file part's file: bytes inline (base64 on the wire, decoded here) or a URI.
type A2AFile struct {
	Name     string `json:"name"`
	MimeType string `json:"mimeType"`
	Bytes    []byte `json:"bytes"`
	URI      string `json:"uri"`
}

// maxA2ABody is a2a_proxy.go maxProxyRequestBody: an A2A request over 16 MiB is answered 413.
const maxA2ABody = 16 << 20

// maxChatUploadFiles is uploadPollMode's limit on the parts of one request.
const maxChatUploadFiles = 64

// ChatUploads returns the files the workspace uploaded with chat/uploads, in order.
func (p *Platform) ChatUploads() []Uploaded {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.chatUps)
}

// UploadContent is the content of a staged upload (the canvas downloads it so), nil when there
// is none.
func (p *Platform) UploadContent(fileID string) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	if u := p.up.get(fileID); u != nil && u.f.Open == nil {
		return slices.Clone(u.f.Data)
	}
	return nil
}

func (p *Platform) chatUpload(r *http.Request, body []byte) (int, any) {
	if !p.ownWorkspace(r) {
		return http.StatusNotFound, map[string]string{"error": "workspace not found"}
	}
	files, err := parseFilesForm(r.Header.Get("Content-Type"), body)
	switch {
	case err != nil:
		return http.StatusBadRequest, map[string]string{"error": "malformed multipart body"}
	case len(files) == 0:
		return http.StatusBadRequest, map[string]string{"error": "no files field in request"}
	case len(files) > maxChatUploadFiles:
		return http.StatusBadRequest, map[string]string{"error": "too many files (limit 64)"}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range files {
		if limit := p.up.limits.PerFileBytes; limit > 0 && int64(len(f.Data)) > limit {
			return http.StatusRequestEntityTooLarge, map[string]any{"error": "file exceeds per-file cap", "filename": f.Name}
		}
	}
	staged := p.uploadLocked(files)
	p.chatUps = append(p.chatUps, staged...)
	out := make([]Attachment, len(staged))
	for i, u := range staged {
		out[i] = Attachment{URI: u.URI, Name: u.Name, MimeType: u.MimeType, Size: u.Size}
	}
	return http.StatusOK, map[string]any{"files": out}
}

// parseFilesForm reads the `files` parts of a multipart body, their names sanitized and their
// types reduced as the platform does (SanitizeFilename, safeMimetype).
func parseFilesForm(contentType string, body []byte) ([]File, error) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return nil, errors.New("not multipart/form-data")
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	var files []File
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		if part.FormName() != "files" || part.FileName() == "" {
			continue
		}
		data, err := io.ReadAll(part)
		if err != nil {
			return nil, err
		}
		files = append(files, File{Name: sanitizeName(part.FileName()), MimeType: safeMimetype(part.Header.Get("Content-Type")), Data: data})
	}
}

var unsafeName = regexp.MustCompile(`[^a-zA-Z0-9._\-]`)

// sanitizeName is chat_files.go SanitizeFilename, without its length cap.
func sanitizeName(name string) string {
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	name = unsafeName.ReplaceAllString(name, "_")
	if name == "" || name == "." || name == ".." {
		return "file"
	}
	return name
}

// safeMimetype is chat_files.go safeMimetype: type/subtype, else application/octet-stream.
func safeMimetype(raw string) string {
	mt, _, err := mime.ParseMediaType(raw)
	if err != nil || !strings.Contains(mt, "/") {
		return "application/octet-stream"
	}
	return mt
}
