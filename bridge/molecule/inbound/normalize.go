package inbound

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/chat"
	"github.com/molecule-ai/codex-warm/bridge/molecule/ledger"
	"github.com/molecule-ai/codex-warm/bridge/molecule/platform"
)

// Kind is who a message comes from (the Python daemon's names).
type Kind string

const (
	KindCanvasUser       Kind = "canvas_user"
	KindPeerAgent        Kind = "peer_agent"
	KindDelegationResult Kind = "delegation_result"
)

// Route kinds (ledger.Route.Kind): where a reply goes. They are stored with pending replies.
const (
	RouteNotify = "notify" // POST /workspaces/{ws}/notify: the canvas user of a workspace
	RouteA2A    = "a2a"    // POST /workspaces/{peer}/a2a: a peer agent
)

// Message is one inbound row, normalized.
type Message struct {
	ActivityID string
	Seq        int64 // the platform's mailbox sequence, 0 when the row has none
	Kind       Kind
	PeerID     string
	PeerName   string
	PeerRole   string
	ChatKey    string
	Route      ledger.Route
	// Text is what codex gets: the message text, a note naming attachments, capped.
	Text        string
	Attachments []Attachment
	// Images are the message's image file parts that codex is shown, as data URLs.
	Images    []string
	CreatedAt string
	// OmittedBytes is how much text the cap cut off (0 when none).
	OmittedBytes int
	// Uploads are the files the message names by platform-pending: URI. They are fetched on the
	// chat's worker just before the turn (the inbox's takeUploads), which composes Text again from Body.
	Uploads []Upload
	Body    string
	// Notices tell the chat what of its message codex did not get and why (a file refused or not
	// fetched); they follow the reply.
	Notices []string
	// ReceivedAt is when this run of the daemon read the row: a /stop read after it stops it.
	ReceivedAt time.Time
	// ContextID is a canvas message's params.message.contextId (the inbox's session.go).
	ContextID string
	// MessageID is the A2A messageId of a peer's message (params.message.messageId), which a
	// reply names; "" when the row has none.
	MessageID string
	// DelegationID is a delegation result's delegation_id; "" for other rows.
	DelegationID string
}

// ImageBytes is what msg's images hold.
func (m Message) ImageBytes() int64 {
	var n int64
	for _, u := range m.Images {
		n += int64(len(u))
	}
	return n
}

// Arrived is when the message came: the row's created_at, else (or when it claims a time after
// this run read the row) when this run read it. Parked messages resume in this order, and
// ParkLimit counts from it.
func (msg Message) Arrived() time.Time {
	if t, err := time.Parse(time.RFC3339Nano, msg.CreatedAt); err == nil && !t.After(msg.ReceivedAt) {
		return t
	}
	return msg.ReceivedAt
}

// Disposition says what to do with a row.
type Disposition int

const (
	DispMessage Disposition = iota // answer it
	DispEcho                       // our own reply echoed back: skip, move past
	DispPoison                     // cannot be answered: log with its id, count, move past
)

func (d Disposition) String() string {
	switch d {
	case DispMessage:
		return "message"
	case DispEcho:
		return "echo"
	default:
		return "poison"
	}
}

// Normalized is the outcome of normalize. msg.ActivityID and msg.Seq are set whenever the row
// has them, also for echoes and poison, so the caller can move past the row.
type Normalized struct {
	Msg    Message
	Disp   Disposition
	Reason string // why a row is an echo or poison
	// A2AID is the message's A2A messageId, which the platform's events name it by; "" when
	// the row has none or is not a message.
	A2AID string
}

// Config is what normalization needs to know about us.
type Config struct {
	WorkspaceID  string
	MaxTextBytes int
	// MaxImageBytes caps one decoded image, MaxImagesBytes all images of one message.
	MaxImageBytes  int
	MaxImagesBytes int
}

// Bounds of the attachment note: it is a hint for codex, not a listing.
const (
	maxAttachmentNames    = 20
	MaxAttachmentNameLen  = 100
	attachmentNoteDivisor = 4 // the note takes at most this fraction of the text cap
)

// oneoffSafe matches activity ids that can be used in a one-off chat key as they are.
var oneoffSafe = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// Normalize turns one activity row (docs/PROTOCOL.md section 2) into a message, or says why it is
// skipped. It never panics on any input; it is pure.
func Normalize(raw []byte, cfg Config) Normalized {
	var row map[string]json.RawMessage
	if err := json.Unmarshal(raw, &row); err != nil || row == nil {
		if json.Valid(raw) {
			return Normalized{Disp: DispPoison, Reason: "row is not a JSON object"}
		}
		// Nested past encoding/json's limit, or malformed. The caller knows the row's id from
		// reading the page (rowScanner), which lets the cursor move past it.
		return Normalized{Disp: DispPoison, Reason: fmt.Sprintf("row is not valid JSON (%d bytes): %v", len(raw), err)}
	}
	var n Normalized
	id, ok := platform.RawID(row["id"])
	if !ok {
		return Normalized{Disp: DispPoison, Reason: "row has no id"}
	}
	n.Msg.ActivityID = id
	n.Msg.Seq = RawInt(row["seq"])
	poison := func(reason string) Normalized {
		n.Disp, n.Reason = DispPoison, reason
		return n
	}

	if t := rawString(row["activity_type"]); t != "" && t != "a2a_receive" {
		return poison(fmt.Sprintf("unexpected activity type %q", t))
	}
	method := rawString(row["method"])
	source := rawString(row["source_id"])
	switch {
	case method == MethodUploadReceive:
		// The platform's record of a canvas upload (also of files this workspace uploads): the
		// file comes with the message that names it, never as a message of its own.
		n.Disp, n.Reason = DispEcho, "upload row: its file is fetched with the message that names it"
		return n
	case method == MethodDelegateResult:
		return normalizeDelegation(n, row, cfg)
	case method == "notify" && source == "":
		n.Disp, n.Reason = DispEcho, "our own notify echoed back"
		return n
	case source != "" && source == cfg.WorkspaceID:
		n.Disp, n.Reason = DispEcho, "row sent by this workspace"
		return n
	}

	m := &n.Msg
	m.PeerName = rawString(row["peer_name"])
	m.PeerRole = rawString(row["peer_role"])
	m.CreatedAt = rawString(row["created_at"])
	m.Kind = KindCanvasUser
	if source != "" {
		m.Kind = KindPeerAgent
	}
	peerOK := source != "" && ValidWorkspaceID(source)
	if peerOK {
		m.PeerID = source
	}
	switch m.Kind {
	case KindCanvasUser:
		m.ChatKey = "canvas:" + cfg.WorkspaceID
		m.Route = ledger.Route{Kind: RouteNotify, Workspace: cfg.WorkspaceID}
	case KindPeerAgent:
		if !peerOK {
			return poison(fmt.Sprintf("peer message from %q, which is not a workspace id a reply can go to", chat.CapText(source, 80)))
		}
		m.ChatKey = "peer:" + source
		m.Route = ledger.Route{Kind: RouteA2A, Workspace: source}
	}

	body := requestBody(row["request_body"])
	n.A2AID = platform.A2AMessageID(body)
	if m.Kind == KindCanvasUser {
		m.ContextID = canvasContextID(body)
	}
	if id := platform.A2AMessageID(body); m.Kind == KindPeerAgent && len(id) <= platform.MaxMessageIDLen {
		m.MessageID = strings.ToValidUTF8(id, "")
	}
	parts, found := findParts(body)
	var texts []string
	var files []Attachment
	if found {
		texts, files, m.Images, m.Uploads = splitParts(parts, cfg)
	}
	text := strings.Join(texts, "\n")
	// A message of files alone has no text: the summary the platform writes for it names the
	// method and the workspace ("message/send → ws (queued for poll)"), not anything the user said.
	if strings.TrimSpace(text) == "" && len(files) == 0 {
		text = rawString(row["summary"])
	}
	files = appendRowAttachments(files, row["attachments"])
	m.Attachments = files
	if strings.TrimSpace(text) == "" && len(m.Attachments) == 0 {
		return poison("message has no text")
	}
	if len(m.Uploads) > 0 {
		m.Body = text
		if m.Kind != KindCanvasUser {
			// The platform stages uploads for the canvas user alone; a peer naming one names a
			// file of this workspace's user, which its chat must not get.
			for i := range m.Uploads {
				m.Uploads[i].Refused = "not fetched: only files the canvas user uploads are"
			}
		}
	}
	m.Text, m.OmittedBytes = ComposeText(text, m.Attachments, cfg.MaxTextBytes)
	return n
}

// ComposeText appends the attachment note to text and caps the whole at limit bytes. The note is
// kept (it is small and bounded) and the text is cut instead.
func ComposeText(text string, attachments []Attachment, limit int) (string, int) {
	text = strings.ToValidUTF8(text, "\uFFFD")
	note := attachmentNote(attachments, limit/attachmentNoteDivisor)
	sep := ""
	if note != "" && text != "" {
		sep = "\n\n"
	}
	capped, omitted := chat.TruncateN(text, limit-len(note)-len(sep), "message")
	return capped + sep + note, omitted
}

// Attachment is a file of a message as the note names it: its name and, for an image, what
// became of it.
type Attachment struct {
	Name string
	Why  string // "" for a plain file
	URI  string // where it is, "" when unknown
}

// attachmentNote is "[attachments: a, b (why)]" (at most limit bytes), or "" without attachments.
func attachmentNote(names []Attachment, limit int) string {
	if len(names) == 0 {
		return ""
	}
	shown := names
	if len(shown) > maxAttachmentNames {
		shown = shown[:maxAttachmentNames]
	}
	list := make([]string, len(shown))
	for i, n := range shown {
		list[i] = chat.Truncate(strings.Join(strings.Fields(n.Name), " "), MaxAttachmentNameLen, "name")
		list[i] = strings.ReplaceAll(list[i], "\n", " ")
		if n.Why != "" {
			list[i] += " (" + n.Why + ")"
		}
	}
	note := "[attachments: " + strings.Join(list, ", ")
	if extra := len(names) - len(shown); extra > 0 {
		note += fmt.Sprintf(" and %d more", extra)
	}
	note += "]"
	if len(note) > limit {
		note = fmt.Sprintf("[attachments: %d]", len(names))
		if len(note) > limit {
			return ""
		}
	}
	return note
}

// OneoffKey is the chat key of a message that must not join a shared thread.
func OneoffKey(activityID string) string {
	if oneoffSafe.MatchString(activityID) {
		return "oneoff:" + activityID
	}
	sum := sha256.Sum256([]byte(activityID))
	return "oneoff:" + hex.EncodeToString(sum[:16])
}

// requestBody decodes request_body, which some platform versions store as a JSON string holding
// the JSON object.
func requestBody(raw json.RawMessage) map[string]json.RawMessage {
	var body map[string]json.RawMessage
	if json.Unmarshal(raw, &body) == nil {
		return body
	}
	var s string
	if json.Unmarshal(raw, &s) == nil && json.Unmarshal([]byte(s), &body) == nil {
		return body
	}
	return nil
}

// findParts looks for the message parts where the runtime puts them: params.message.parts, else
// params.parts, else parts.
func findParts(body map[string]json.RawMessage) ([]json.RawMessage, bool) {
	if body == nil {
		return nil, false
	}
	var params map[string]json.RawMessage
	_ = json.Unmarshal(body["params"], &params)
	if params != nil {
		var msg map[string]json.RawMessage
		_ = json.Unmarshal(params["message"], &msg)
		if parts, ok := rawArray(msg["parts"]); ok {
			return parts, true
		}
		if parts, ok := rawArray(params["parts"]); ok {
			return parts, true
		}
	}
	return rawArray(body["parts"])
}

// splitParts returns the texts of text parts (kind or type "text"), the file parts for the
// attachment note, the images codex is shown (see partImage) and the files to fetch from the
// platform's pending uploads (see pendingPart).
func splitParts(parts []json.RawMessage, cfg Config) (texts []string, files []Attachment, images []string, uploads []Upload) {
	budget := cfg.MaxImagesBytes
	for _, raw := range parts {
		var p map[string]json.RawMessage
		if json.Unmarshal(raw, &p) != nil || p == nil {
			continue
		}
		k := rawString(p["kind"])
		if k == "" {
			k = rawString(p["type"])
		}
		switch k {
		case "text":
			if t := rawString(p["text"]); t != "" {
				texts = append(texts, t)
			}
		case "file":
			var f map[string]json.RawMessage
			_ = json.Unmarshal(p["file"], &f)
			name := firstString(f, "name", "uri", "url")
			if name == "" {
				name = firstString(p, "name", "filename")
			}
			if name == "" {
				name = "file"
			}
			uri := firstString(f, "uri", "url")
			if up, ok := pendingPart(f, uri, cfg); ok {
				up.Att, up.Name = len(files), name
				uploads = append(uploads, up)
				files = append(files, Attachment{Name: name, URI: uri})
				continue
			}
			url, why := partImage(f, cfg, &budget)
			if url != "" {
				images = append(images, url)
			}
			files = append(files, Attachment{Name: name, Why: why, URI: uri})
		}
	}
	return texts, files, images, uploads
}

// ImageTypes are the image types codex is given, as http.DetectContentType names them.
var ImageTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

// maxNoteURILen bounds a URI quoted in the attachment note.
const maxNoteURILen = 100

// partImage reads an A2A file object as an image for codex. A file whose mimeType is not image/*
// is a plain file (url and why empty). An image with inline base64 bytes of a supported type
// (png, jpeg, gif, webp: the declared type must be what the bytes sniff as) within maxBytes and
// the message's remaining budget of maxImagesBytes becomes a data URL, why "image"; any other image is not shown,
// and why says so for the note. Nothing here fails the message.
func partImage(f map[string]json.RawMessage, cfg Config, budget *int) (url, why string) {
	maxBytes := cfg.MaxImageBytes
	declared := DeclaredType(f)
	if !strings.HasPrefix(declared, "image/") {
		return "", ""
	}
	if !ImageTypes[declared] {
		return "", fmt.Sprintf("image of type %s not shown: only png, jpeg, gif and webp are", chat.Truncate(declared, 40, "type"))
	}
	encoded := rawString(f["bytes"])
	if encoded == "" {
		if uri := firstString(f, "uri", "url"); uri != "" {
			return "", fmt.Sprintf("image at %s not fetched", chat.Truncate(uri, maxNoteURILen, "uri"))
		}
		return "", "image without bytes, not shown"
	}
	limit := min(maxBytes, *budget)
	// Checked before decoding, so an oversized part costs no allocation; the slack allows for
	// line breaks in wrapped base64 (2 in 78), the exact check follows the decoding.
	if base64.StdEncoding.DecodedLen(len(encoded)) > limit+limit/8+4 {
		return "", OverCap(base64.StdEncoding.DecodedLen(len(encoded)), cfg)
	}
	data, err := decodeBase64(encoded)
	if err != nil {
		return "", "image not shown: its bytes are not valid base64"
	}
	return ImageURL(declared, data, cfg, budget)
}

// DeclaredType is the media type a file object declares, lower case without parameters
// (image/jpg read as image/jpeg).
func DeclaredType(f map[string]json.RawMessage) string {
	declared := strings.ToLower(strings.TrimSpace(firstString(f, "mimeType", "mime_type", "mediaType")))
	declared, _, _ = strings.Cut(declared, ";")
	declared = strings.TrimSpace(declared)
	if declared == "image/jpg" {
		declared = "image/jpeg"
	}
	return declared
}

// ImageURL makes data, declared as a type of imageTypes, the data URL codex is shown, within
// maxImageBytes and what is left of the message's budget, when the bytes sniff as that type.
// Otherwise url is empty and why says why the image is not shown.
func ImageURL(declared string, data []byte, cfg Config, budget *int) (url, why string) {
	if len(data) > min(cfg.MaxImageBytes, *budget) {
		return "", OverCap(len(data), cfg)
	}
	if sniffed := http.DetectContentType(data); sniffed != declared {
		return "", fmt.Sprintf("image not shown: labelled %s but the bytes are %s", declared, sniffed)
	}
	*budget -= len(data)
	return "data:" + declared + ";base64," + base64.StdEncoding.EncodeToString(data), "image"
}

func OverCap(size int, cfg Config) string {
	if size > cfg.MaxImageBytes {
		return fmt.Sprintf("image not shown: %d bytes, over the %d-byte cap", size, cfg.MaxImageBytes)
	}
	return fmt.Sprintf("image not shown: the message's images are over the %d-byte total cap", cfg.MaxImagesBytes)
}

// decodeBase64 decodes standard or URL-safe base64, padded or not, ignoring line breaks and
// spaces (MIME-style wrapping).
func decodeBase64(s string) ([]byte, error) {
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == ' ' || r == '\t' {
			return -1
		}
		return r
	}, s)
	s = strings.TrimRight(s, "=")
	if strings.ContainsAny(s, "-_") {
		return base64.RawURLEncoding.DecodeString(s)
	}
	return base64.RawStdEncoding.DecodeString(s)
}

// appendRowAttachments adds a row's attachments (strings, or objects with a name-like field) to
// the files of its parts. With include=peer_info the platform lists the file parts of the
// message again there (handlers/activity.go extractAttachmentsFromRequestBody): one whose uri, or
// without a uri whose name, a part already has is not named twice.
func appendRowAttachments(files []Attachment, raw json.RawMessage) []Attachment {
	items, ok := rawArray(raw)
	if !ok {
		return files
	}
	seen := make(map[string]bool, len(files))
	for _, f := range files {
		seen["uri:"+f.URI] = f.URI != ""
		seen["name:"+f.Name] = true
	}
	for _, it := range items {
		if s := rawString(it); s != "" {
			files = append(files, Attachment{Name: s})
			continue
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal(it, &obj) != nil || obj == nil {
			continue
		}
		name := firstString(obj, "name", "filename", "title", "uri", "url")
		if name == "" {
			name = "attachment"
		}
		uri := firstString(obj, "uri", "url")
		if (uri != "" && seen["uri:"+uri]) || (uri == "" && seen["name:"+name]) {
			continue
		}
		files = append(files, Attachment{Name: name, URI: uri})
	}
	return files
}

func firstString(obj map[string]json.RawMessage, keys ...string) string {
	for _, k := range keys {
		if s := rawString(obj[k]); s != "" {
			return s
		}
	}
	return ""
}

// rawString returns a JSON string's value, "" for anything else (null, numbers, objects).
func rawString(raw json.RawMessage) string {
	if len(raw) == 0 || raw[0] != '"' {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

// RawInt reads an integer given as a JSON number or numeric string; 0 otherwise.
func RawInt(raw json.RawMessage) int64 {
	var num json.Number
	if json.Unmarshal(raw, &num) != nil {
		if s := rawString(raw); s != "" {
			num = json.Number(s)
		}
	}
	n, err := strconv.ParseInt(num.String(), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

func rawArray(raw json.RawMessage) ([]json.RawMessage, bool) {
	if len(raw) == 0 {
		return nil, false
	}
	var a []json.RawMessage
	if json.Unmarshal(raw, &a) != nil || a == nil {
		return nil, false
	}
	return a, true
}

// canvasContextID reads a canvas row's params.message.contextId ("" when it has none).
func canvasContextID(body map[string]json.RawMessage) string {
	var params map[string]json.RawMessage
	_ = json.Unmarshal(body["params"], &params)
	var msg map[string]json.RawMessage
	_ = json.Unmarshal(params["message"], &msg)
	return rawString(msg["contextId"])
}

// WorkspaceIDPattern is the Molecule runtime's rule for workspace ids. Ids end up in URL paths
// and chat keys, so anything else is rejected rather than escaped.
var WorkspaceIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,127}$`)

// ValidWorkspaceID reports whether id is a Molecule workspace id.
func ValidWorkspaceID(id string) bool { return WorkspaceIDPattern.MatchString(id) }
