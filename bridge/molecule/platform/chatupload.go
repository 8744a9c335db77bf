package platform

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"os"
	"time"
)

// chatUploadTimeout bounds one chat/uploads request: up to 10 files of 100 MB each.
const chatUploadTimeout = 10 * time.Minute

// UploadFile is a file to upload: the copy on disk, and the name and type it is sent with.
type UploadFile struct {
	Name, MimeType string
	Path           string
}

// UploadedFile is one file of chat/uploads' answer, and one attachment of notify.
type UploadedFile struct {
	URI      string `json:"uri"`
	Name     string `json:"name"`
	MimeType string `json:"mimeType,omitempty"`
	Size     int64  `json:"size,omitempty"`
}

// chatUpload posts files to POST /workspaces/{ws}/chat/uploads as the canvas does: multipart,
// one `files` part each, with its type. The body is made anew for every attempt, from the
// copies on disk.
func (c *Client) ChatUpload(ctx context.Context, ws string, files []UploadFile) ([]UploadedFile, error) {
	stream := func() (io.Reader, string) {
		pr, pw := io.Pipe()
		mw := multipart.NewWriter(pw)
		go func() {
			pw.CloseWithError(writeParts(mw, files))
		}()
		return pr, mw.FormDataContentType()
	}
	body, err := c.do(ctx, request{op: "chat upload", method: http.MethodPost,
		path: "/workspaces/" + ws + "/chat/uploads", stream: stream, timeout: max(c.timeout, chatUploadTimeout)})
	if err != nil {
		return nil, err
	}
	var ans struct {
		Files []UploadedFile `json:"files"`
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		return nil, fmt.Errorf("chat upload: the answer is not {\"files\": [...]}: %w", err)
	}
	for _, f := range ans.Files {
		if f.URI == "" {
			return nil, errors.New("chat upload: the answer names a file without a uri")
		}
	}
	return ans.Files, nil
}

// writeParts writes each file as a `files` part and closes the form.
func writeParts(mw *multipart.Writer, files []UploadFile) error {
	for _, f := range files {
		h := make(textproto.MIMEHeader)
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="files"; filename=%q`, f.Name))
		h.Set("Content-Type", f.MimeType)
		w, err := mw.CreatePart(h)
		if err != nil {
			return err
		}
		src, err := os.Open(f.Path)
		if err != nil {
			return err
		}
		_, err = io.Copy(w, src)
		src.Close()
		if err != nil {
			return err
		}
	}
	return mw.Close()
}
