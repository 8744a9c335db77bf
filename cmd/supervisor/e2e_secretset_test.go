//go:build linux

package main

// The org's ChatGPT login the platform owns never leaves the daemon (issue 37), in the codex
// image's layout: CODEX_HOME/auth.json holds the login as it was synced at boot, the platform's
// secrets hold the newer, rotated one. Before the fix, send_file answered "will be sent" for a
// file holding the newer login's tokens (or the whole /secrets/values answer, which a model can
// fetch with the workspace token), and a reply could print them: neither the scan nor the
// redactor knew the login the platform owns.

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/molecule"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/codexauth"
	"github.com/molecule-ai/codex-warm/internal/codexauth/codexauthtest"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
	"github.com/molecule-ai/codex-warm/internal/secretset"
)

// leaks is what a test wants never to leave: a name (the file the agent writes it in) → value.
type leaks struct {
	mu   sync.Mutex
	vals map[string]string
}

func (l *leaks) set(name, value string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.vals == nil {
		l.vals = map[string]string{}
	}
	l.vals[name] = value
}

func (l *leaks) all() map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]string, len(l.vals))
	for k, v := range l.vals {
		out[k] = v
	}
	return out
}

// quote is every value, as a model printing them would write them.
func (l *leaks) quote() string {
	var b strings.Builder
	for name, v := range l.all() {
		b.WriteString(name + "=" + v + "\n")
	}
	return b.String()
}

// leakScript answers "QUOTE" by printing every secret of l, and sends files as sendScript does.
func leakScript(l *leaks) func(mockmodel.Request) mockmodel.Reply {
	return func(req mockmodel.Request) mockmodel.Reply {
		if !req.HasToolOutput && req.LastUserText == "QUOTE" {
			return mockmodel.Reply{Text: "here they are:\n" + l.quote()}
		}
		return sendScript(req)
	}
}

// writeLeaks writes each secret of l into its own file in dir (as a model told to copy them
// would) and returns the file names.
func writeLeaks(t *testing.T, dir string, l *leaks) []string {
	t.Helper()
	var names []string
	for name, v := range l.all() {
		writeFile(t, filepath.Join(dir, name+".txt"), []byte("# "+name+"\n"+v+"\n"))
		names = append(names, name+".txt")
	}
	return names
}

// checkText fails the test when text carries a value of l, or shows fewer than want redactions.
func checkText(t *testing.T, what, text string, l *leaks, want int) {
	t.Helper()
	for name, v := range l.all() {
		if strings.Contains(text, v) {
			t.Errorf("%s carries %s: %q", what, name, text)
		}
	}
	if n := strings.Count(text, secretset.Redacted); n < want {
		t.Errorf("%s shows %d redactions, want %d: %q", what, n, want, text)
	}
}

// checkRefused fails the test unless reply names every file as refused for holding a credential.
func checkRefused(t *testing.T, reply string, files []string) {
	t.Helper()
	for _, f := range files {
		if !strings.Contains(reply, "["+f+" not sent: it contains a credential") {
			t.Errorf("the reply does not name %s as refused for a credential: %q", f, reply)
		}
	}
}

// secretsAnswer is GET /workspaces/{ws}/secrets/values as codex's commands can fetch it with the
// workspace token (curl … > s.json).
func secretsAnswer(t *testing.T, e *e2e) []byte {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.plat.URL()+"/workspaces/"+e.plat.WorkspaceID()+"/secrets/values", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.plat.Token())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET secrets/values: HTTP %d %v: %s", resp.StatusCode, err, b)
	}
	return b
}

// molecule's leak check: the agent sends every file of l, plus the workspace's whole secrets
// answer, and nothing goes; then it prints them all, and the canvas reads none.
func checkMoleculeLeaks(t *testing.T, e *e2e, d *daemonProc, l *leaks) {
	t.Helper()
	dir := e.chatFolder(e.canvasKey())
	files := writeLeaks(t, dir, l)
	writeFile(t, filepath.Join(dir, "s.json"), secretsAnswer(t, e))
	files = append(files, "s.json")
	before := len(e.plat.Notifies())
	e.plat.Enqueue(moleculetest.CanvasMessage("SEND " + strings.Join(files, " ")))
	d.waitPlatform("the reply with the files", func() bool { return len(e.plat.Notifies()) > before })
	n := e.plat.Notifies()[before]
	checkRefused(t, n.Message, files)
	if len(n.Attachments) != 0 || len(e.plat.ChatUploads()) != 0 {
		t.Errorf("files left: attachments %+v, uploads %+v", n.Attachments, e.plat.ChatUploads())
	}
	checkText(t, "the reply with the files", n.Message, l, 0)

	e.plat.Enqueue(moleculetest.CanvasMessage("QUOTE"))
	d.waitPlatform("the quoting reply", func() bool { return len(e.plat.Notifies()) > before+1 })
	checkText(t, "the quoting reply", e.plat.Notifies()[before+1].Message, l, len(l.all()))
}

// The codex image's layout: auth.json and CODEX_AUTH_JSON hold the login synced at boot (L0),
// the platform's secrets the rotated one (L1) the daemon holds. L1's refresh and access tokens, the whole
// secrets answer, a workspace secret, the workspace token and platform_inbound_secret stay in,
// as files and as text; so do L0's tokens.
func TestE2ESecretsAuthJSONOlderThanThePlatformsLogin(t *testing.T) {
	t.Parallel()
	l := &leaks{}
	e := newPlatformLoginE2EWith(t, e2eConfig{Script: leakScript(l)})
	l0 := e.seed
	e.rotate() // the platform renewed the login before the daemon started: L1 is in its secrets only
	var l1 struct {
		Tokens struct {
			AccessToken  string `json:"access_token"`
			RefreshToken string `json:"refresh_token"`
		} `json:"tokens"`
	}
	secrets := secretsAnswer(t, e.e2e)
	var all map[string]string
	if err := json.Unmarshal(secrets, &all); err != nil || json.Unmarshal([]byte(all[molecule.CodexAuthSecret]), &l1) != nil {
		t.Fatalf("the platform's secrets: %s (%v)", secrets, err)
	}
	e.plat.SetSecret("DB_PASSWORD", "db-password-from-the-workspace-secrets")
	d := e.start()
	if got := e.send(d, "first"); got != "reply #1: first" {
		t.Fatalf("first reply %q", got)
	}
	if st := chatgptStatus(t, d); st.Source != "platform secrets" {
		t.Fatalf("the daemon holds the login from %q, want the platform's secrets (L1)", st.Source)
	}
	var seed struct {
		Tokens struct {
			RefreshToken string `json:"refresh_token"`
		} `json:"tokens"`
	}
	_ = json.Unmarshal([]byte(l0), &seed)
	l.set("l1_rt", l1.Tokens.RefreshToken)
	l.set("l1_at", l1.Tokens.AccessToken)
	l.set("l0_rt", seed.Tokens.RefreshToken)
	l.set("db_password", "db-password-from-the-workspace-secrets")
	l.set("workspace_token", e.plat.Token())
	l.set("inbound_secret", e.plat.InboundSecret())
	checkMoleculeLeaks(t, e.e2e, d, l)
	if log := d.log(); strings.Contains(log, l1.Tokens.RefreshToken) || strings.Contains(log, l1.Tokens.AccessToken) {
		t.Error("the daemon's log carries L1's tokens")
	}
	d.stop(stopTimeout)
}

// The platform's login only in the environment (CODEX_AUTH_JSON, no auth.json, nothing in the
// secrets), on the local inbox: the env's tokens stay in, as files and as text.
func TestE2ESecretsLoginOnlyInTheEnvironment(t *testing.T) {
	t.Parallel()
	is, err := codexauthtest.New(codexauthtest.Config{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = is.Close() })
	l := &leaks{}
	e := newE2E(t, e2eConfig{Local: true, Script: leakScript(l), Authorize: is.Accepts, Env: []string{
		codexauth.TokenURLEnv + "=" + is.URL(),
		"CODEX_AUTH_JSON=" + string(is.AuthJSON()),
		"OPENAI_API_KEY=sk-the-operators-api-key-0123456789",
	}})
	if err := e.mock.WriteCodexHomeChatGPT(e.codexHome); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(e.codexHome, codexauth.AuthFile)); err == nil {
		t.Fatal("CODEX_HOME has an auth.json: the login must be in the environment only")
	}
	d := e.start()
	c := newLocalClient(t, d)
	if r := c.send("k", "first"); r.Text != "reply #1: first" {
		t.Fatalf("first reply %q", r.Text)
	}
	l.set("env_rt", is.LiveRefreshToken())
	l.set("env_at", is.AccessToken())
	l.set("env_id", is.IDToken())
	l.set("api_key", "sk-the-operators-api-key-0123456789")
	files := writeLeaks(t, e.chatFolder("k"), l)
	r := c.send("k", "SEND "+strings.Join(files, " "))
	checkRefused(t, r.Text, files)
	if len(r.Files) != 0 {
		t.Errorf("%d files sent", len(r.Files))
	}
	checkText(t, "the quoting reply", c.send("k", "QUOTE").Text, l, len(l.all()))
	d.stop(stopTimeout)
}

// A login the platform renews after the daemon started (L2, read from the secrets) is known at
// once: its tokens stay in, as files and as text, and so does a platform_inbound_secret the
// platform rotated in a heartbeat answer.
func TestE2ESecretsLearnedAfterStart(t *testing.T) {
	t.Parallel()
	l := &leaks{}
	e := newPlatformLoginE2EWith(t, e2eConfig{Script: leakScript(l)})
	d := e.start("--chatgpt-platform-check", "100ms", "--heartbeat-interval", "100ms")
	if got := e.send(d, "first"); got != "reply #1: first" {
		t.Fatalf("first reply %q", got)
	}
	e.rotate()
	d.waitUntil("the daemon adopted the platform's renewed login", func() bool {
		return chatgptStatus(t, d).LastOutcome == codexauth.OutcomeAdopted
	})
	e.plat.SetInboundSecret("inbound-secret-rotated-after-start")
	beats := len(e.plat.Heartbeats())
	d.waitPlatform("two heartbeats after the inbound secret rotated", func() bool { return len(e.plat.Heartbeats()) >= beats+2 })
	l.set("l2_rt", e.is.LiveRefreshToken())
	l.set("l2_at", e.is.AccessToken())
	l.set("inbound_secret", "inbound-secret-rotated-after-start")
	checkMoleculeLeaks(t, e.e2e, d, l)
	d.stop(stopTimeout)
}

// The set crosses a reload: L1, which the platform rotated away from before the reload (its
// access token may still be valid), is in no source the new image reads (the secrets hold L2,
// auth.json and the environment L0), and it still never leaves, as a file or as text.
func TestE2ESecretsCrossAReload(t *testing.T) {
	t.Parallel()
	l := &leaks{}
	e := newPlatformLoginE2EWith(t, e2eConfig{Script: leakScript(l)})
	installReloadable(t, e.e2e)
	d := e.start("--chatgpt-platform-check", "100ms")
	e.rotate() // L1
	d.waitUntil("the daemon adopted L1", func() bool { return chatgptStatus(t, d).LastOutcome == codexauth.OutcomeAdopted })
	l1At, l1Rt := e.is.AccessToken(), e.is.LiveRefreshToken()
	l1Expires := chatgptStatus(t, d).Expires
	e.rotate() // L2: it expires later than L1
	d.waitUntil("the daemon adopted L2", func() bool { return chatgptStatus(t, d).Expires.After(l1Expires) })
	if got := e.send(d, "before the reload"); !strings.Contains(got, "before the reload") {
		t.Fatalf("reply %q", got)
	}

	installBin(t, e.bin)
	if code, out := e.reloadCmd(); code != 0 {
		t.Fatalf("reload: exit %d: %s", code, out)
	}
	if doc := d.status(); doc.Daemon.Reloads != 1 {
		t.Fatalf("reloads %d, want 1", doc.Daemon.Reloads)
	}
	l.set("l1_at", l1At)
	l.set("l1_rt", l1Rt)
	checkMoleculeLeaks(t, e.e2e, d, l)
	d.stop(stopTimeout)
}
