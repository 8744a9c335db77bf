package moleculetest_test

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

func (c client) multipart(path string, files map[string]string) (int, []byte) {
	c.t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for name, content := range files {
		h := make(textproto.MIMEHeader)
		h.Set("Content-Disposition", `form-data; name="files"; filename="`+name+`"`)
		h.Set("Content-Type", "text/plain; charset=utf-8")
		w, _ := mw.CreatePart(h)
		_, _ = io.WriteString(w, content)
	}
	_ = mw.Close()
	req, _ := http.NewRequest(http.MethodPost, c.p.URL()+path, &b)
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// The workspace's own chat/uploads, poll mode: each file staged with a chat_upload_receive row in
// the workspace's own feed, the answer {"files":[{uri,name,mimeType,size}]} with the name
// sanitized and the type reduced; no files is a 400; a notify's attachment needs uri and name.
func TestChatUploadsAsThePlatformTakesThem(t *testing.T) {
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	c := client{t: t, p: p, token: p.Token()}
	path := "/workspaces/" + p.WorkspaceID() + "/chat/uploads"
	status, body := c.multipart(path, map[string]string{"my report.txt": "hello"})
	var ans struct {
		Files []moleculetest.Attachment `json:"files"`
	}
	if status != http.StatusOK || json.Unmarshal(body, &ans) != nil || len(ans.Files) != 1 {
		t.Fatalf("upload: %d %s", status, body)
	}
	f := ans.Files[0]
	if !strings.HasPrefix(f.URI, "platform-pending:"+p.WorkspaceID()+"/") || f.Name != "my_report.txt" || f.MimeType != "text/plain" || f.Size != 5 {
		t.Errorf("answer %+v", f)
	}
	up := p.ChatUploads()
	if len(up) != 1 || up[0].URI != f.URI || string(p.UploadContent(up[0].FileID)) != "hello" {
		t.Errorf("staged %+v", up)
	}
	status, body = c.do(http.MethodGet, "/workspaces/"+p.WorkspaceID()+"/activity?type=a2a_receive&since_secs=600", "")
	if status != http.StatusOK || !strings.Contains(string(body), `"method":"chat_upload_receive"`) || !strings.Contains(string(body), f.URI) {
		t.Errorf("own feed: %d %s, want the chat_upload_receive row", status, body)
	}
	if status, _ := c.multipart(path, nil); status != http.StatusBadRequest {
		t.Errorf("no files: %d, want 400", status)
	}
	notify := "/workspaces/" + p.WorkspaceID() + "/notify"
	if status, _ := c.do(http.MethodPost, notify, `{"message":"m","attachments":[{"uri":"","name":"x"}]}`); status != http.StatusBadRequest {
		t.Errorf("attachment without uri: %d, want 400", status)
	}
	if status, _ := c.do(http.MethodPost, notify, `{"message":"m","attachments":[{"uri":"`+f.URI+`","name":"my_report.txt"}]}`); status != http.StatusOK {
		t.Fatalf("notify with attachment: %d", status)
	}
	if n := p.Notifies(); len(n) != 1 || len(n[0].Attachments) != 1 || n[0].Attachments[0].URI != f.URI {
		t.Errorf("notifies %+v", n)
	}
}
