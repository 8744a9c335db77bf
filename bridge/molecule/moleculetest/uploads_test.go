package moleculetest_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

// A canvas send with files writes a chat_upload_receive row per file before the message, whose
// file parts name them by platform-pending: URI; the content is served with its type, stays
// readable after the ack, and answers 404 once expired; /uploads/limits needs no token.
func TestCanvasUploadsAsThePlatformStagesThem(t *testing.T) {
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	c := client{t: t, p: p, token: p.Token()}
	up, msgID := p.SendCanvasFiles("see", moleculetest.File{Name: "a.txt", MimeType: "text/plain", Data: []byte("hello")})

	status, body := c.do(http.MethodGet, "/workspaces/"+p.WorkspaceID()+"/activity?type=a2a_receive&since_secs=600", "")
	var rows []map[string]any
	if status != http.StatusOK || json.Unmarshal(body, &rows) != nil || len(rows) != 2 {
		t.Fatalf("activity: %d %s", status, body)
	}
	// Newest first: the message, then the upload row.
	if rows[1]["method"] != "chat_upload_receive" || rows[1]["id"] != up[0].RowID || rows[1]["source_id"] != nil {
		t.Errorf("upload row %v", rows[1])
	}
	rb := rows[1]["request_body"].(map[string]any)
	if rb["file_id"] != up[0].FileID || rb["uri"] != "platform-pending:"+p.WorkspaceID()+"/"+up[0].FileID || rb["mimeType"] != "text/plain" {
		t.Errorf("upload row body %v", rb)
	}
	if rows[0]["id"] != msgID || !strings.Contains(string(body), `"uri":"`+up[0].URI+`"`) || strings.Contains(string(body), "aGVsbG8") {
		t.Errorf("message row %v: want the platform-pending: URI and no bytes", rows[0])
	}

	content := "/workspaces/" + p.WorkspaceID() + "/pending-uploads/" + up[0].FileID + "/content"
	ack := "/workspaces/" + p.WorkspaceID() + "/pending-uploads/" + up[0].FileID + "/ack"
	if status, body := c.do(http.MethodGet, content, ""); status != http.StatusOK || string(body) != "hello" {
		t.Fatalf("content: %d %q", status, body)
	}
	for range 2 {
		if status, _ := c.do(http.MethodPost, ack, ""); status != http.StatusOK {
			t.Fatalf("ack: %d", status)
		}
	}
	if status, body := c.do(http.MethodGet, content, ""); status != http.StatusOK || string(body) != "hello" {
		t.Errorf("content after the ack: %d %q", status, body)
	}
	if status, _ := (client{t: t, p: p, token: "wrong"}).do(http.MethodGet, content, ""); status != http.StatusUnauthorized {
		t.Errorf("content without the token: %d", status)
	}
	p.ExpireUpload(up[0].FileID)
	if status, _ := c.do(http.MethodGet, content, ""); status != http.StatusNotFound {
		t.Errorf("content after expiry: %d", status)
	}
	if status, _ := c.do(http.MethodPost, ack, ""); status != http.StatusNotFound {
		t.Errorf("ack after expiry: %d", status)
	}
	if status, body := (client{t: t, p: p}).do(http.MethodGet, "/uploads/limits", ""); status != http.StatusOK ||
		string(body) != `{"per_file_bytes":104857600,"per_request_bytes":104857600,"max_attachments_per_message":10}`+"\n" {
		t.Errorf("limits: %d %s", status, body)
	}
	if p.UploadFetches(up[0].FileID) != 2 || p.UploadAcks(up[0].FileID) != 2 {
		t.Errorf("recorded %d fetches and %d acks", p.UploadFetches(up[0].FileID), p.UploadAcks(up[0].FileID))
	}
}
