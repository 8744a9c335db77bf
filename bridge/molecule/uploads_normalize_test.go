package molecule

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// uploadRow is the platform's chat_upload_receive row (chat_files.go uploadPollMode) with the
// attachments[] projection include=peer_info adds.
func uploadRow(t *testing.T, id, fileID, name string) []byte {
	t.Helper()
	uri := "platform-pending:" + testWS + "/" + fileID
	row, err := json.Marshal(map[string]any{"id": id, "activity_type": "a2a_receive", "method": methodUploadReceive,
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
	n := normalize(uploadRow(t, "up-1", "0b1e2c3d-0000-4000-8000-000000000001", "photo.png"), normCfg())
	if n.disp != dispEcho || n.msg.ActivityID != "up-1" {
		t.Fatalf("disp %v (%s), id %q; want an echo the position moves past", n.disp, n.reason, n.msg.ActivityID)
	}
}

// The file parts of a canvas message that name this workspace's uploads are read as uploads to
// fetch; the attachments[] projection does not name them twice, and a message of files alone
// does not take the platform's summary for its text.
func TestNormalizePendingParts(t *testing.T) {
	t.Parallel()
	a := "platform-pending:" + testWS + "/0b1e2c3d-0000-4000-8000-000000000001"
	b := "platform-pending:" + testWS + "/0b1e2c3d-0000-4000-8000-000000000002"
	n := normalize(pendingRow(t, nil, "read these", a, b), normCfg())
	if n.disp != dispMessage {
		t.Fatalf("disp %v (%s)", n.disp, n.reason)
	}
	m := n.msg
	if len(m.uploads) != 2 || m.uploads[1].fileID != "0b1e2c3d-0000-4000-8000-000000000002" || m.uploads[1].att != 1 ||
		m.uploads[0].name != "filea.bin" || m.uploads[0].mimeType != "application/octet-stream" || m.uploads[0].size != 12 || m.uploads[0].refused != "" {
		t.Fatalf("uploads = %+v", m.uploads)
	}
	if m.Text != "read these\n\n[attachments: filea.bin, fileb.bin]" || m.body != "read these" {
		t.Errorf("text %q body %q", m.Text, m.body)
	}

	alone := normalize(pendingRow(t, nil, "", a), normCfg()).msg
	if alone.body != "" || alone.Text != "[attachments: filea.bin]" {
		t.Errorf("files alone: body %q text %q, want no text but the note", alone.body, alone.Text)
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
			n := normalize(pendingRow(t, tc.source, "hi", tc.uri), normCfg())
			if n.disp != dispMessage || len(n.msg.uploads) != 1 {
				t.Fatalf("disp %v (%s), uploads %+v", n.disp, n.reason, n.msg.uploads)
			}
			if up := n.msg.uploads[0]; !strings.Contains(up.refused, tc.refused) {
				t.Errorf("refused %q, want it to say %q", up.refused, tc.refused)
			}
		})
	}
}

// Saved names follow the platform's SanitizeFilename: no path, no separators, no control or
// shell characters, a bounded length that keeps a short extension.
func TestSanitizeFilename(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 150) + ".tar.gz"
	for in, want := range map[string]string{
		"report.pdf":             "report.pdf",
		"../../etc/passwd":       "passwd",
		"/abs/path/x.txt":        "x.txt",
		"dir/":                   "dir",
		"":                       "file",
		".":                      "file",
		"..":                     "file",
		"..\\..\\win.ini":        ".._.._win.ini",
		"a b;rm -rf ~.sh":        "a_b_rm_-rf__.sh",
		"nul\x00byte\n.txt":      "nul_byte_.txt",
		"résumé.pdf":             "r_sum_.pdf",
		"$(id)`x`.png":           "__id__x_.png",
		long:                     strings.Repeat("a", 97) + ".gz",
		strings.Repeat("b", 200): strings.Repeat("b", 100),
	} {
		got := sanitizeFilename(in)
		if got != want {
			t.Errorf("sanitizeFilename(%q) = %q, want %q", in, got, want)
		}
		if strings.ContainsAny(got, "/\\\x00") || len(got) > maxSavedNameLen || filepath.Base(got) != got {
			t.Errorf("sanitizeFilename(%q) = %q is not a plain name", in, got)
		}
	}
}

// Chat folders are plain names, and keys that sanitize alike stay apart.
func TestChatDirName(t *testing.T) {
	t.Parallel()
	a, b := chatDirName("canvas:ws-1"), chatDirName("canvas_ws-1")
	if a == b || !strings.HasPrefix(a, "canvas_ws-1-") || filepath.Base(a) != a {
		t.Errorf("chatDirName: %q and %q", a, b)
	}
	if d := chatDirName("peer:../../x/" + strings.Repeat("y", 300)); strings.ContainsAny(d, "/\\") || len(d) > 64+13 {
		t.Errorf("hostile key gives %q", d)
	}
}
