package inbound

import (
	"encoding/json"
	"strings"
	"testing"
)

// uploadRow is the platform's chat_upload_receive row (chat_files.go uploadPollMode) with the
// attachments[] projection include=peer_info adds.
func uploadRow(t *testing.T, id, fileID, name string) []byte {
	t.Helper()
	uri := "platform-pending:" + testWS + "/" + fileID
	row, err := json.Marshal(map[string]any{"id": id, "activity_type": "a2a_receive", "method": MethodUploadReceive,
		"source_id": nil, "summary": "chat_upload_receive: " + name,
		"request_body": map[string]any{"file_id": fileID, "name": name, "mimeType": "image/png", "size": 70, "uri": uri},
		"attachments":  []any{map[string]any{"kind": "image", "uri": uri, "mime_type": "image/png", "name": name}}})
	if err != nil {
		t.Fatal(err)
	}
	return row
}

// pendingRow is a message row whose file parts name uploads by platform-pending: URI, with the
// summary the platform writes for a poll-mode send and the attachments[] projection.
func pendingRow(t *testing.T, source any, text string, uris ...string) []byte {
	t.Helper()
	var parts, atts []any
	if text != "" {
		parts = append(parts, map[string]any{"kind": "text", "text": text})
	}
	for i, u := range uris {
		name := "file" + string(rune('a'+i)) + ".bin"
		parts = append(parts, map[string]any{"kind": "file", "file": map[string]any{"name": name, "mimeType": "Application/Octet-Stream", "uri": u, "size": 12}})
		atts = append(atts, map[string]any{"kind": "file", "uri": u, "name": name})
	}
	row, err := json.Marshal(map[string]any{"id": "msg-1", "activity_type": "a2a_receive", "method": "message/send",
		"source_id": source, "summary": "message/send → " + testWS + " (queued for poll)", "attachments": atts,
		"request_body": map[string]any{"params": map[string]any{"message": map[string]any{"parts": parts}}}})
	if err != nil {
		t.Fatal(err)
	}
	return row
}

// An upload row is never a message: it is finished like our own echo, whoever it names.
func TestNormalizeUploadRowIsSkipped(t *testing.T) {
	t.Parallel()
	n := Normalize(uploadRow(t, "up-1", "0b1e2c3d-0000-4000-8000-000000000001", "photo.png"), normCfg())
	if n.Disp != DispEcho || n.Msg.ActivityID != "up-1" {
		t.Fatalf("disp %v (%s), id %q; want an echo the position moves past", n.Disp, n.Reason, n.Msg.ActivityID)
	}
}

// The file parts of a canvas message that name this workspace's uploads are read as uploads to
// fetch; the attachments[] projection does not name them twice, and a message of files alone
// does not take the platform's summary for its text.
func TestNormalizePendingParts(t *testing.T) {
	t.Parallel()
	a := "platform-pending:" + testWS + "/0b1e2c3d-0000-4000-8000-000000000001"
	b := "platform-pending:" + testWS + "/0b1e2c3d-0000-4000-8000-000000000002"
	n := Normalize(pendingRow(t, nil, "read these", a, b), normCfg())
	if n.Disp != DispMessage {
		t.Fatalf("disp %v (%s)", n.Disp, n.Reason)
	}
	m := n.Msg
	if len(m.Uploads) != 2 || m.Uploads[1].FileID != "0b1e2c3d-0000-4000-8000-000000000002" || m.Uploads[1].Att != 1 ||
		m.Uploads[0].Name != "filea.bin" || m.Uploads[0].MimeType != "application/octet-stream" || m.Uploads[0].Size != 12 || m.Uploads[0].Refused != "" {
		t.Fatalf("uploads = %+v", m.Uploads)
	}
	if m.Text != "read these\n\n[attachments: filea.bin, fileb.bin]" || m.Body != "read these" {
		t.Errorf("text %q body %q", m.Text, m.Body)
	}

	alone := Normalize(pendingRow(t, nil, "", a), normCfg()).Msg
	if alone.Body != "" || alone.Text != "[attachments: filea.bin]" {
		t.Errorf("files alone: body %q text %q, want no text but the note", alone.Body, alone.Text)
	}
}

// Hostile platform-pending: URIs are read, never fetched: another workspace's upload, an id that
// would leave the URL path, and any upload named by a peer instead of the canvas user.
func TestNormalizePendingPartsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, uri string
		source    any
		refused   string
	}{
		{"other workspace", "platform-pending:ws-other/0b1e2c3d-0000-4000-8000-000000000001", nil, `it was uploaded to workspace "ws-other"`},
		{"path traversal", "platform-pending:" + testWS + "/../../registry/register", nil, "upload id is not one the platform gives"},
		{"query in the id", "platform-pending:" + testWS + "/abc?x=1", nil, "upload id is not one the platform gives"},
		{"no id", "platform-pending:" + testWS, nil, "upload id is not one the platform gives"},
		{"from a peer", "platform-pending:" + testWS + "/0b1e2c3d-0000-4000-8000-000000000001", "ws-peer", "only files the canvas user uploads"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := Normalize(pendingRow(t, tc.source, "hi", tc.uri), normCfg())
			if n.Disp != DispMessage || len(n.Msg.Uploads) != 1 {
				t.Fatalf("disp %v (%s), uploads %+v", n.Disp, n.Reason, n.Msg.Uploads)
			}
			if up := n.Msg.Uploads[0]; !strings.Contains(up.Refused, tc.refused) {
				t.Errorf("refused %q, want it to say %q", up.Refused, tc.refused)
			}
		})
	}
}
