package moleculetest

// Canvas uploads as the platform stages them for a poll-mode workspace (workspace-server
// internal/handlers/chat_files.go uploadPollMode, pending_uploads.go, internal/pendinguploads,
// internal/uploads/limits.go): each file is stored as a pending upload, and one activity row per
// file (method chat_upload_receive) is written before the canvas sends its message, whose file
// parts name the files by platform-pending: URI and carry no bytes. The workspace reads the bytes
// from GET /workspaces/{ws}/pending-uploads/{file_id}/content and acknowledges them with POST
// .../ack; the content stays readable after the ack (until a sweep, which the fake never runs)
// and answers 404 once the upload has expired (ExpireUpload).

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"time"
)

// Routes of the pending uploads.
const (
	RouteUploadContent Route = "upload-content"
	RouteUploadAck     Route = "upload-ack"
	// RouteUploadLimits is GET /uploads/limits, which the real platform serves without auth.
	RouteUploadLimits Route = "upload-limits"
)

// UploadLimits is the answer of GET /uploads/limits (internal/uploads/limits.go).
type UploadLimits struct {
	PerFileBytes             int64 `json:"per_file_bytes"`
	PerRequestBytes          int64 `json:"per_request_bytes"`
	MaxAttachmentsPerMessage int   `json:"max_attachments_per_message"`
}

// DefaultUploadLimits are the platform's: 100 MB a file and a request, 10 attachments.
var DefaultUploadLimits = UploadLimits{PerFileBytes: 100 << 20, PerRequestBytes: 100 << 20, MaxAttachmentsPerMessage: 10}

// File is a file a test uploads as the canvas would.
type File struct {
	Name     string
	MimeType string
	Data     []byte
	// Open, when set, generates the content each time it is served instead of Data, and Size is
	// its length (a large body without holding it).
	Open func() io.Reader
	Size int64
}

// Uploaded is a file staged as a pending upload: what the canvas puts in its message's file part.
type Uploaded struct {
	FileID   string
	URI      string // platform-pending:<ws>/<file_id>
	Name     string
	MimeType string
	Size     int64
	// RowID is the id of its chat_upload_receive activity row.
	RowID string
}

// pendingUpload is one staged file of the fake.
type pendingUpload struct {
	f       File
	expired bool
	acked   int
	fetched int
	// trickle, when set, makes the content answer send the first n bytes and then hang until
	// the request ends.
	trickle int
}

// uploads is the fake's pending-upload store; Platform.mu guards it.
type uploads struct {
	files  map[string]*pendingUpload
	next   int
	limits UploadLimits
}

func (u *uploads) get(id string) *pendingUpload {
	if u.files == nil {
		return nil
	}
	return u.files[id]
}

// Upload stages files as the canvas's POST /chat/uploads does for a poll-mode workspace: each
// becomes a pending upload with a chat_upload_receive row of its own in the activity feed.
func (p *Platform) Upload(files ...File) []Uploaded {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.uploadLocked(files)
}

// uploadLocked is Upload with p.mu held.
func (p *Platform) uploadLocked(files []File) []Uploaded {
	out := make([]Uploaded, len(files))
	for i, f := range files {
		size := int64(len(f.Data))
		if f.Open != nil {
			size = f.Size
		}
		f.Size = size
		p.up.next++
		id := "00000000-0000-4000-8000-" + leftPad(strconv.Itoa(p.up.next), 12)
		if p.up.files == nil {
			p.up.files = make(map[string]*pendingUpload)
		}
		p.up.files[id] = &pendingUpload{f: f}
		uri := "platform-pending:" + p.cfg.WorkspaceID + "/" + id
		// chat_files.go uploadPollMode's row; include=peer_info adds the attachments[]
		// projection of its flat manifest (handlers/activity.go), which the daemon always asks for.
		row := Row{
			"activity_type": "a2a_receive",
			"method":        "chat_upload_receive",
			"source_id":     nil,
			"target_id":     p.cfg.WorkspaceID,
			"summary":       "chat_upload_receive: " + f.Name,
			"status":        "ok",
			"request_body": map[string]any{"file_id": id, "name": f.Name, "mimeType": f.MimeType,
				"size": size, "uri": uri},
			"attachments": []any{map[string]any{"kind": kindOf(f.MimeType), "uri": uri, "mime_type": f.MimeType, "name": f.Name}},
			"created_at":  time.Now().UTC().Format(time.RFC3339Nano),
		}
		out[i] = Uploaded{FileID: id, URI: uri, Name: f.Name, MimeType: f.MimeType, Size: size, RowID: p.logRowLocked(row)}
	}
	p.changedLocked()
	return out
}

func leftPad(s string, n int) string {
	for len(s) < n {
		s = "0" + s
	}
	return s
}

// kindOf is handlers/activity.go kindFromMimeType.
func kindOf(mime string) string {
	for _, k := range []string{"image", "audio", "video"} {
		if len(mime) > len(k) && mime[:len(k)+1] == k+"/" {
			return k
		}
	}
	return "file"
}

// CanvasFiles is the canvas's message/send after an upload (canvas useChatSend.ts): a text part
// when text is not empty and a file part {kind:"file", file:{name, mimeType, uri, size}} per
// file, with no bytes. The row carries the attachments[] projection and the summary the real
// platform writes for a poll-mode send.
func (p *Platform) CanvasFiles(text string, files ...Uploaded) Row {
	var parts []any
	if text != "" {
		parts = append(parts, map[string]any{"kind": "text", "text": text})
	}
	atts := make([]any, 0, len(files))
	for _, f := range files {
		parts = append(parts, map[string]any{"kind": "file", "file": map[string]any{
			"name": f.Name, "mimeType": f.MimeType, "uri": f.URI, "size": f.Size}})
		// The projection reads mime_type, which canvas file parts do not have.
		atts = append(atts, map[string]any{"kind": "file", "uri": f.URI, "name": f.Name})
	}
	r := messageRow(nil, "message/send")
	msg := r["request_body"].(map[string]any)["params"].(map[string]any)["message"].(map[string]any)
	msg["parts"] = parts
	msg["messageId"] = "canvas-msg-" + strconv.Itoa(len(files)) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	r["summary"] = "message/send → " + p.cfg.WorkspaceID + " (queued for poll)"
	r["target_id"] = p.cfg.WorkspaceID
	if len(atts) > 0 {
		r["attachments"] = atts
	}
	return r
}

// SendCanvasFiles does what the canvas does when its user sends text with files: Upload, then
// the message (CanvasFiles) enqueued after the upload rows. It returns the uploads and the
// message row's id.
func (p *Platform) SendCanvasFiles(text string, files ...File) ([]Uploaded, string) {
	up := p.Upload(files...)
	return up, p.Enqueue(p.CanvasFiles(text, up...))[0]
}

// ExpireUpload makes the upload's content and ack answer 404, as after its 24 h TTL.
func (p *Platform) ExpireUpload(fileID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if u := p.up.get(fileID); u != nil {
		u.expired = true
	}
}

// TrickleUpload makes the upload's content answers send its first n bytes and then hang until
// the request ends: a slow body.
func (p *Platform) TrickleUpload(fileID string, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if u := p.up.get(fileID); u != nil {
		u.trickle = n
	}
}

// SetUploadLimits sets what GET /uploads/limits answers (default DefaultUploadLimits).
func (p *Platform) SetUploadLimits(l UploadLimits) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.up.limits = l
}

// UploadAcks is how many acks of the upload the platform accepted.
func (p *Platform) UploadAcks(fileID string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if u := p.up.get(fileID); u != nil {
		return u.acked
	}
	return 0
}

// UploadFetches is how many content answers of the upload began (status 200).
func (p *Platform) UploadFetches(fileID string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if u := p.up.get(fileID); u != nil {
		return u.fetched
	}
	return 0
}

// uploadContent serves GET /workspaces/{ws}/pending-uploads/{file_id}/content (pending_uploads.go
// GetContent): 404 for an unknown, expired or other workspace's file; the bytes with the stored
// mimetype, Content-Disposition and Content-Length otherwise, acked or not.
func (p *Platform) uploadContent(r *http.Request, _ []byte) (int, any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	u := p.up.get(r.PathValue("fid"))
	if !p.ownWorkspace(r) || u == nil || u.expired {
		return http.StatusNotFound, map[string]string{"error": "pending upload not found or expired"}
	}
	u.fetched++
	mime := u.f.MimeType
	if mime == "" {
		mime = "application/octet-stream"
	}
	var open func() io.Reader
	if u.f.Open != nil {
		open = u.f.Open
	} else {
		data := u.f.Data
		open = func() io.Reader { return bytes.NewReader(data) }
	}
	return http.StatusOK, rawBody{
		header: http.Header{"Content-Type": {mime}, "Content-Length": {strconv.FormatInt(u.f.Size, 10)},
			"Content-Disposition": {`attachment; filename="` + u.f.Name + `"`}},
		open: open, trickle: u.trickle, hold: p.hold,
	}
}

// uploadAck serves POST .../ack (pending_uploads.go Ack): idempotent 200 {"acked":true}, 404 for
// an unknown or expired file.
func (p *Platform) uploadAck(r *http.Request, _ []byte) (int, any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	u := p.up.get(r.PathValue("fid"))
	if !p.ownWorkspace(r) || u == nil || u.expired {
		return http.StatusNotFound, map[string]string{"error": "pending upload not found, expired, or already acked"}
	}
	u.acked++
	return http.StatusOK, map[string]bool{"acked": true}
}

func (p *Platform) uploadLimits(*http.Request, []byte) (int, any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.up.limits == (UploadLimits{}) {
		return http.StatusOK, DefaultUploadLimits
	}
	return http.StatusOK, p.up.limits
}

// rawBody is a non-JSON answer: its headers replace the JSON content type, and its body is
// copied from open (after trickle bytes it hangs until the request ends, when trickle > 0).
type rawBody struct {
	header  http.Header
	open    func() io.Reader
	trickle int
	hold    func(context.Context) // Platform.hold
}

func (b rawBody) answerHeader() http.Header { return b.header }

func (b rawBody) writeTo(w http.ResponseWriter, r *http.Request) {
	if b.trickle <= 0 {
		_, _ = io.Copy(w, b.open())
		return
	}
	_, _ = io.CopyN(w, b.open(), int64(b.trickle))
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	b.hold(r.Context())
}
