package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// sendScript makes the model call send_file once for each path after "SEND " in the user's
// text (in one response), then answer "done: <the last tool output>".
func sendScript(req mockmodel.Request) mockmodel.Reply {
	if req.HasToolOutput {
		return mockmodel.Reply{Text: "done: " + req.ToolOutput}
	}
	if rest, ok := strings.CutPrefix(req.LastUserText, "SEND "); ok {
		var calls []mockmodel.ToolCall
		for _, p := range strings.Fields(rest) {
			args, _ := json.Marshal(map[string]string{"path": p, "caption": "see " + filepath.Base(p)})
			calls = append(calls, mockmodel.ToolCall{Name: "send_file", Arguments: string(args)})
		}
		return mockmodel.Reply{ToolCalls: calls}
	}
	return mockmodel.DefaultScript(req)
}

// chatFolder makes and returns the folder of chatKey under the working directory, named as the
// inbox names it (<workdir>/.chats/<key with unsafe characters as _>-<12 hex digits of SHA-256>).
func (e *e2e) chatFolder(chatKey string) string {
	e.t.Helper()
	sum := sha256.Sum256([]byte(chatKey))
	name := regexp.MustCompile(`[^a-zA-Z0-9._\-]`).ReplaceAllString(chatKey, "_") + "-" + hex.EncodeToString(sum[:6])
	dir := filepath.Join(e.workDir, ".chats", name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		e.t.Fatal(err)
	}
	return dir
}

func testPNG(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	img := image.NewRGBA(image.Rect(0, 0, 4, 3))
	img.Set(1, 1, color.RGBA{G: 255, A: 255})
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// The agent sends a file and an image to the canvas user: both are uploaded with chat/uploads
// (one request), then the reply's notify names them as attachments. The platform writes our own
// uploads back into our feed as chat_upload_receive rows; they start no turn and get no reply.
func TestE2EMoleculeSendsFilesToCanvas(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Script: sendScript})
	dir := e.chatFolder(e.canvasKey())
	report, chart := []byte("total: 42\n"), testPNG(t)
	writeFile(t, filepath.Join(dir, "report.txt"), report)
	writeFile(t, filepath.Join(dir, "chart.png"), chart)
	d := e.start()
	e.plat.Enqueue(moleculetest.CanvasMessage("SEND report.txt " + filepath.Join(dir, "chart.png")))
	d.waitPlatform("the reply", func() bool { return len(e.plat.Notifies()) == 1 })
	n := e.plat.Notifies()[0]
	if !strings.HasPrefix(n.Message, "done: ") {
		t.Errorf("reply %q, want codex's answer after the tool calls", n.Message)
	}
	ups := e.plat.ChatUploads()
	if len(ups) != 2 || len(n.Attachments) != 2 {
		t.Fatalf("uploads %+v, attachments %+v; want the two files", ups, n.Attachments)
	}
	want := map[string][]byte{"report.txt": report, "chart.png": chart}
	types := map[string]string{"report.txt": "text/plain", "chart.png": "image/png"}
	for i, a := range n.Attachments {
		if a.URI != ups[i].URI || a.Name != ups[i].Name || a.Size != int64(len(want[a.Name])) || a.MimeType != types[a.Name] {
			t.Errorf("attachment %+v, want the upload %+v", a, ups[i])
		}
		if got := e.plat.UploadContent(ups[i].FileID); !bytes.Equal(got, want[a.Name]) {
			t.Errorf("uploaded %s = %q, want the file's content", a.Name, got)
		}
	}
	if n := len(e.plat.CallsTo(moleculetest.RouteChatUpload)); n != 1 {
		t.Errorf("%d chat/uploads calls, want 1", n)
	}
	// Our own upload rows come back through the feed: finished without a turn.
	d.waitUntil("the upload rows finished", func() bool { s := d.bridgeStats(); return s.Unacked == 0 && s.PendingReplies == 0 })
	d.waitPolls(2)
	if n := len(e.mock.Requests()); n != 2 {
		t.Errorf("%d model requests, want 2 (the turn and its tool follow-up)", n)
	}
	if n := len(e.plat.Notifies()); n != 1 {
		t.Errorf("%d notifies, want 1: %q", n, e.notifyTexts())
	}
	if s := d.bridgeStats(); s.FilesSent != 2 || s.FilesRefused != 0 {
		t.Errorf("files sent %d refused %d, want 2 and 0", s.FilesSent, s.FilesRefused)
	}
	d.stop(stopTimeout)
	if left, _ := filepath.Glob(filepath.Join(e.stateDir, "outbox", "*", "*")); len(left) != 0 {
		t.Errorf("outbox copies left after delivery: %v", left)
	}
}

// A peer gets the files as A2A file parts with the bytes inline: it cannot fetch our
// platform-pending: URIs. Nothing is uploaded.
func TestE2EMoleculeSendsFilesToPeer(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Script: sendScript})
	dir := e.chatFolder("peer:peer-files")
	report, chart := []byte("peer report"), testPNG(t)
	writeFile(t, filepath.Join(dir, "report.txt"), report)
	writeFile(t, filepath.Join(dir, "chart.png"), chart)
	d := e.start()
	e.plat.Enqueue(moleculetest.PeerMessage("peer-files", "SEND report.txt chart.png"))
	d.waitPlatform("the reply", func() bool { return len(e.plat.A2ASends()) == 1 })
	s := e.plat.A2ASends()[0]
	// The two calls ran in parallel: the files come in the order they were taken.
	got := map[string]moleculetest.A2AFile{}
	for _, f := range s.Files {
		got[f.Name] = f
	}
	if len(s.Files) != 2 || !bytes.Equal(got["report.txt"].Bytes, report) || got["report.txt"].MimeType != "text/plain" ||
		!bytes.Equal(got["chart.png"].Bytes, chart) || got["chart.png"].MimeType != "image/png" {
		t.Errorf("file parts %+v, want report.txt and chart.png inline", s.Files)
	}
	if !strings.HasPrefix(s.Text, "done: ") {
		t.Errorf("reply text %q", s.Text)
	}
	if n := len(e.plat.CallsTo(moleculetest.RouteChatUpload)); n != 0 {
		t.Errorf("%d chat/uploads calls for a peer, want none", n)
	}
	d.stop(stopTimeout)
}

// A model told to send what may never leave sends nothing: auth.json by its path, the state
// directory's sessions.json by a relative path, a symbolic link to /etc/passwd, a copy of
// auth.json inside the chat's folder, a hard link, and another chat's upload. The reply names
// each refused file with its reason; nothing is uploaded.
func TestE2EMoleculeSendFileRefusesWhatMayNotLeave(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Script: sendScript})
	// An API key login: the daemon then leaves auth.json to codex, and the key is a secret all
	// the same (the ChatGPT tokens are read the same way; chatfiles and codexauth test them).
	const token = "sk-proj-THIS-IS-THE-ACCOUNT-KEY-0123456789"
	auth := []byte(`{"auth_mode":"apikey","OPENAI_API_KEY":"` + token + `"}`)
	writeFile(t, filepath.Join(e.codexHome, "auth.json"), auth)
	dir := e.chatFolder(e.canvasKey())
	other := e.chatFolder("peer:someone-else")
	if err := os.MkdirAll(filepath.Join(other, "uploads"), 0o700); err != nil {
		t.Fatal(err)
	}
	theirs := filepath.Join(other, "uploads", "f1-plan.pdf")
	writeFile(t, theirs, []byte("another user's upload"))
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "passwd")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "copy.json"), append([]byte("notes\n"), auth...))
	writeFile(t, filepath.Join(dir, "linked.txt"), []byte("a file with two names"))
	if err := os.Link(filepath.Join(dir, "linked.txt"), filepath.Join(e.root, "second-name.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(e.stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(e.stateDir, "sessions.json"), []byte(`{}`))
	relState, err := filepath.Rel(dir, filepath.Join(e.stateDir, "sessions.json"))
	if err != nil {
		t.Fatal(err)
	}
	paths := map[string]string{
		filepath.Join(e.codexHome, "auth.json"): "outside this chat's folder",
		relState:                                "outside this chat's folder",
		"passwd":                                "symbolic link",
		"copy.json":                             "credential",
		"linked.txt":                            "hard links",
		theirs:                                  "outside this chat's folder",
	}
	var names []string
	for p := range paths {
		names = append(names, p)
	}
	d := e.start()
	e.plat.Enqueue(moleculetest.CanvasMessage("SEND " + strings.Join(names, " ")))
	d.waitPlatform("the reply", func() bool { return len(e.plat.Notifies()) == 1 })
	n := e.plat.Notifies()[0]
	if len(n.Attachments) != 0 || len(e.plat.CallsTo(moleculetest.RouteChatUpload)) != 0 {
		t.Fatalf("attachments %+v, uploads %d; want nothing sent", n.Attachments, len(e.plat.CallsTo(moleculetest.RouteChatUpload)))
	}
	for p, why := range paths {
		if !strings.Contains(n.Message, "["+p+" not sent: ") || !regexp.MustCompile(regexp.QuoteMeta("["+p+" not sent: ")+`[^\]]*`+regexp.QuoteMeta(why)).MatchString(n.Message) {
			t.Errorf("reply does not name %s as refused because %q:\n%s", p, why, n.Message)
		}
	}
	if strings.Contains(n.Message, token) {
		t.Errorf("the reply carries the token")
	}
	if s := d.bridgeStats(); s.FilesRefused != int64(len(paths)) || s.FilesSent != 0 {
		t.Errorf("files refused %d sent %d, want %d and 0", s.FilesRefused, s.FilesSent, len(paths))
	}
	d.stop(stopTimeout)
}

// The agent choosing no file sends nothing: no upload, a notify without attachments.
func TestE2EMoleculeNoFileSendsNothing(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Script: sendScript})
	d := e.start()
	e.plat.Enqueue(moleculetest.CanvasMessage("just talk"))
	d.waitPlatform("the reply", func() bool { return len(e.plat.Notifies()) == 1 })
	if n := e.plat.Notifies()[0]; n.Message != "reply #1: just talk" || n.Attachments != nil {
		t.Errorf("notify %+v, want the text alone", n)
	}
	if n := len(e.plat.CallsTo(moleculetest.RouteChatUpload)); n != 0 {
		t.Errorf("%d chat/uploads calls, want none", n)
	}
	d.stop(stopTimeout)
}

// A notify that fails after the upload is sent again naming the same URIs: the files are not
// uploaded twice.
func TestE2EMoleculeSendFileNotifyFailureUploadsOnce(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Script: sendScript})
	writeFile(t, filepath.Join(e.chatFolder(e.canvasKey()), "report.txt"), []byte("once"))
	e.plat.FailNext(moleculetest.RouteNotify, 2, http.StatusBadGateway)
	d := e.start()
	e.plat.Enqueue(moleculetest.CanvasMessage("SEND report.txt"))
	d.waitPlatform("the reply", func() bool { return len(e.plat.Notifies()) == 1 })
	if n := len(e.plat.CallsTo(moleculetest.RouteNotify)); n != 3 {
		t.Errorf("%d notify calls, want 3 (two refused)", n)
	}
	ups := e.plat.ChatUploads()
	if n := len(e.plat.CallsTo(moleculetest.RouteChatUpload)); n != 1 || len(ups) != 1 {
		t.Fatalf("%d chat/uploads calls, %d files; want one upload", n, len(ups))
	}
	if a := e.plat.Notifies()[0].Attachments; len(a) != 1 || a[0].URI != ups[0].URI {
		t.Errorf("attachments %+v, want the one upload %s", a, ups[0].URI)
	}
	d.stop(stopTimeout)
}

// SIGKILL between the upload and the notify: the URIs were stored before the notify, so the
// next run sends the notify naming them and uploads nothing again.
func TestE2EMoleculeSendFileSurvivesKillAfterUpload(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Script: sendScript})
	writeFile(t, filepath.Join(e.chatFolder(e.canvasKey()), "report.txt"), []byte("survives"))
	e.plat.HangNext(moleculetest.RouteNotify, 1)
	d := e.start()
	e.plat.Enqueue(moleculetest.CanvasMessage("SEND report.txt"))
	d.waitPlatform("the upload and the notify that hangs", func() bool {
		return len(e.plat.ChatUploads()) == 1 && len(e.plat.CallsTo(moleculetest.RouteNotify)) == 1
	})
	d.kill()
	e.plat.ClearFailures()

	d2 := e.start()
	d2.waitPlatform("the reply", func() bool { return len(e.plat.Notifies()) == 1 })
	ups := e.plat.ChatUploads()
	if n := len(e.plat.CallsTo(moleculetest.RouteChatUpload)); n != 1 || len(ups) != 1 {
		t.Fatalf("%d chat/uploads calls, want 1", n)
	}
	if a := e.plat.Notifies()[0].Attachments; len(a) != 1 || a[0].URI != ups[0].URI || a[0].Name != "report.txt" {
		t.Errorf("attachments %+v, want the upload made before the kill", a)
	}
	if n := len(e.mock.Requests()); n != 2 {
		t.Errorf("%d model requests, want 2: the reply was stored, codex not run again", n)
	}
	d2.stop(stopTimeout)
}

// The platform refusing the upload for good (413) does not lose the reply: it goes without the
// file, naming it and why.
func TestE2EMoleculeSendFileUploadRefusedKeepsTheReply(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Script: sendScript})
	writeFile(t, filepath.Join(e.chatFolder(e.canvasKey()), "report.txt"), []byte("too big for them"))
	e.plat.FailNext(moleculetest.RouteChatUpload, 1, http.StatusRequestEntityTooLarge)
	d := e.start()
	e.plat.Enqueue(moleculetest.CanvasMessage("SEND report.txt"))
	d.waitPlatform("the reply", func() bool { return len(e.plat.Notifies()) == 1 })
	n := e.plat.Notifies()[0]
	if !strings.HasPrefix(n.Message, "done: ") || !strings.Contains(n.Message, "[report.txt not sent: the platform refused the upload (the reply is larger than the platform takes (413))]") || n.Attachments != nil {
		t.Errorf("notify %+v, want the text naming the refused file and no attachments", n)
	}
	d.stop(stopTimeout)
}

// The local inbox carries the files the agent sent in the reply's JSON, content inline, and in
// the event stream's reply event; a refused one is named in the text.
func TestE2ELocalInboxSendsFiles(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true, Script: sendScript})
	dir := e.chatFolder("demo")
	chart := testPNG(t)
	writeFile(t, filepath.Join(dir, "chart.png"), chart)
	d := e.start("--metrics-listen", "127.0.0.1:0")
	c := newLocalClient(t, d)
	r := c.send("demo", "SEND chart.png "+filepath.Join(e.codexHome, "config.toml"))
	if len(r.Files) != 1 || r.Files[0].Name != "chart.png" || r.Files[0].MimeType != "image/png" || !bytes.Equal(r.Files[0].Data, chart) {
		t.Errorf("files %+v, want chart.png inline", r.Files)
	}
	if !strings.Contains(r.Text, "config.toml not sent: it is outside this chat's folder") {
		t.Errorf("reply %q does not name the refused file", r.Text)
	}

	req, _ := http.NewRequest(http.MethodPost, c.base+"/v1/chats/demo/messages", strings.NewReader(`{"text":"SEND chart.png"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	if _, err := body.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	_, data, ok := strings.Cut(body.String(), "event: reply\ndata: ")
	if !ok {
		t.Fatalf("no reply event in %q", body.String())
	}
	data, _, _ = strings.Cut(data, "\n")
	var ev struct {
		Files []struct {
			Name string `json:"name"`
			Data []byte `json:"data"`
		} `json:"files"`
	}
	if err := json.Unmarshal([]byte(data), &ev); err != nil || len(ev.Files) != 1 || !bytes.Equal(ev.Files[0].Data, chart) {
		t.Errorf("reply event files %+v (%v), want chart.png inline", ev.Files, err)
	}
	if f := d.status().LocalFiles; f == nil || f.Sent != 2 || f.Refused != 1 {
		t.Errorf("status local files %+v, want 2 sent and 1 refused", f)
	}
	f := scrapeMetrics(t, d.ready.Daemon.MetricsListen, "")
	if sent, refused := f.MustValue(t, "codex_warm_local_files_sent_total", nil), f.MustValue(t, "codex_warm_local_files_refused_total", nil); sent != 2 || refused != 1 {
		t.Errorf("metrics count %v files sent and %v refused, want 2 and 1", sent, refused)
	}
	d.stop(stopTimeout)
}

// SIGKILL while the upload hangs: the reply was stored with its files (the copies under the
// state directory) before delivery began, so the next run uploads them and sends the reply
// without running codex again.
func TestE2EMoleculeSendFileSurvivesKillBeforeUpload(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Script: sendScript})
	dir := e.chatFolder(e.canvasKey())
	writeFile(t, filepath.Join(dir, "report.txt"), []byte("kept"))
	e.plat.HangNext(moleculetest.RouteChatUpload, 1)
	d := e.start()
	e.plat.Enqueue(moleculetest.CanvasMessage("SEND report.txt"))
	d.waitPlatform("the upload that hangs", func() bool { return len(e.plat.CallsTo(moleculetest.RouteChatUpload)) == 1 })
	d.kill()
	e.plat.ClearFailures()
	// What goes is the copy taken when the agent chose the file, not the file as it is now.
	writeFile(t, filepath.Join(dir, "report.txt"), []byte("changed after the turn"))

	d2 := e.start()
	d2.waitPlatform("the reply", func() bool { return len(e.plat.Notifies()) == 1 })
	ups := e.plat.ChatUploads()
	if len(ups) != 1 || string(e.plat.UploadContent(ups[0].FileID)) != "kept" {
		t.Fatalf("uploads %+v, want the one copy taken in the turn", ups)
	}
	if a := e.plat.Notifies()[0].Attachments; len(a) != 1 || a[0].URI != ups[0].URI {
		t.Errorf("attachments %+v", a)
	}
	if n := len(e.mock.Requests()); n != 2 {
		t.Errorf("%d model requests, want 2: codex not run again", n)
	}
	d2.stop(stopTimeout)
}

// A peer send the platform refuses as too large (413) because of its files goes again without
// them, naming them: the reply itself is not lost.
func TestE2EMoleculeSendFileTooLargeForPeerKeepsTheReply(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Script: sendScript})
	writeFile(t, filepath.Join(e.chatFolder("peer:peer-big"), "report.txt"), []byte("big"))
	e.plat.FailNext(moleculetest.RouteA2A, 1, http.StatusRequestEntityTooLarge)
	d := e.start()
	e.plat.Enqueue(moleculetest.PeerMessage("peer-big", "SEND report.txt"))
	d.waitPlatform("the reply", func() bool { return len(e.plat.A2ASends()) == 1 })
	s := e.plat.A2ASends()[0]
	if len(s.Files) != 0 || !strings.HasPrefix(s.Text, "done: ") || !strings.Contains(s.Text, "[report.txt not sent: the platform refused them as too large (413)]") {
		t.Errorf("send %+v, want the text naming the file and no file part", s)
	}
	d.stop(stopTimeout)
}

// A peer reply's files travel inline under the platform's 16 MiB request cap: a 10 MiB file goes
// (13.3 MiB as base64), and of it and a 2 MiB one (the two calls run in parallel, in either
// order) the one taken second is past the 11 MiB a reply takes: refused and named.
func TestE2EMoleculeSendFileToPeerUnderTheRequestCap(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Script: sendScript})
	dir := e.chatFolder("peer:peer-cap")
	content := map[string][]byte{
		"big.bin":  bytes.Repeat([]byte("0123456789abcdef"), 10<<20/16),
		"more.bin": bytes.Repeat([]byte("x"), 2<<20),
	}
	for name, data := range content {
		writeFile(t, filepath.Join(dir, name), data)
	}
	d := e.start()
	e.plat.Enqueue(moleculetest.PeerMessage("peer-cap", "SEND big.bin more.bin"))
	d.waitPlatform("the reply", func() bool { return len(e.plat.A2ASends()) == 1 })
	s := e.plat.A2ASends()[0]
	if len(s.Files) != 1 || !bytes.Equal(s.Files[0].Bytes, content[s.Files[0].Name]) {
		t.Fatalf("%d file parts, want one of the two whole", len(s.Files))
	}
	taken, other := s.Files[0].Name, "big.bin"
	if taken == "big.bin" {
		other = "more.bin"
	}
	want := "[" + other + " not sent: it is " + strconv.Itoa(len(content[other])) + " bytes, over the " +
		strconv.Itoa(11<<20-len(content[taken])) + " bytes left of this reply's budget of 11534336 bytes for files" +
		" (a peer gets the files of one reply inline, in one request)]"
	if !strings.Contains(s.Text, want) {
		t.Errorf("reply %q does not name %s as over what is left of the peer's budget: want %q", s.Text, other, want)
	}
	d.stop(stopTimeout)
}
