package inbound

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/molecule-ai/codex-warm/bridge/chat"
)

// MethodUploadReceive is the method of the platform's row for an uploaded file.
const MethodUploadReceive = "chat_upload_receive"

// pendingScheme starts the URI of a file the platform holds for the workspace.
const pendingScheme = "platform-pending:"

// Upload is a file a message names by platform-pending: URI.
type Upload struct {
	Att      int // its index in message.Attachments
	FileID   string
	Name     string
	MimeType string // as declared, normalized by declaredType
	Size     int64  // as declared; 0 when unknown
	// Refused says why it is not fetched, when the row alone decides it.
	Refused string
}

// uploadIDPattern is what a file id must look like to go into a URL path unescaped (the
// platform's are UUIDs).
var uploadIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]{0,63}$`)

// pendingPart reads a file part whose uri is a platform-pending: URI; ok is false for any other
// part. Only this workspace's uploads can be fetched.
func pendingPart(f map[string]json.RawMessage, uri string, cfg Config) (Upload, bool) {
	rest, ok := strings.CutPrefix(uri, pendingScheme)
	if !ok {
		return Upload{}, false
	}
	up := Upload{MimeType: DeclaredType(f), Size: RawInt(f["size"])}
	ws, id, _ := strings.Cut(rest, "/")
	switch {
	case ws != cfg.WorkspaceID:
		up.Refused = fmt.Sprintf("not fetched: it was uploaded to workspace %q, not this one", chat.Truncate(ws, 80, "id"))
	case !uploadIDPattern.MatchString(id):
		up.Refused = "not fetched: its upload id is not one the platform gives"
	default:
		up.FileID = id
	}
	return up, true
}
