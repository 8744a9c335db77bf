package molecule

// Replies out: notify to the canvas, A2A message/send to a peer, the rules that decide whether a
// failed attempt is sent again (deliveryCondition), and the reply's files on their way out
// (uploaded for a notify, inline parts for a peer). The wire facts are in docs/molecule.md
// ("Peers and delegation", "Files back to the chat"), each with the platform source it was read
// from.

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/molecule/ledger"
	"github.com/molecule-ai/codex-warm/bridge/molecule/platform"
	"github.com/molecule-ai/codex-warm/internal/chatfiles"
	"go.uber.org/zap"
)

// errFateUnknown is wrapped by a delivery given up on because two attempts were sent and their
// answers lost: notify has no deduplication, so a third copy could be a third bubble.
var errFateUnknown = errors.New("the platform's answer was lost twice; not sending a third copy")

// refusalReason says in a few words why the platform refused a reply for good, for the log.
func refusalReason(route string, err error) string {
	var he *platform.HTTPError
	if !errors.As(err, &he) {
		return "the reply cannot be sent"
	}
	switch {
	case route == routeA2A && he.Status == http.StatusPaymentRequired:
		return "the peer workspace is over its spending budget (402)"
	case route == routeA2A && he.Status == http.StatusForbidden:
		return "this workspace may not message that peer (403: hierarchy, another org, or can_delegate off)"
	case he.Status == http.StatusRequestEntityTooLarge:
		return "the reply is larger than the platform takes (413)"
	case route == routeNotify && he.Status == http.StatusForbidden:
		return "this workspace may not talk to its canvas user (403 talk_to_user_disabled)"
	case he.Status == http.StatusNotFound:
		return "the workspace does not exist (404)"
	}
	return fmt.Sprintf("HTTP %d", he.Status)
}

// Every text the daemon sends the platform (replies, prompts, notes, the heartbeat's
// current_task and sample_error) passes the redactor here, at the one door out, whatever its
// caller did: codex may have read the token, and a text built in a new place must not be the one
// that carries it. Callers that cut a text redact it before the cut too (see currentTask), since
// a cut can leave a token's head that no longer matches.

// deliveryCondition judges a delivery attempt's error. unknown counts the attempts whose fate
// is unknown (the request went out, its answer was lost): notify has no deduplication and a
// push peer takes a second copy as a second turn, so the second such loss ends the delivery
// with errFateUnknown. Refusals (platform.Permanent) end it at once.
func deliveryCondition(err error, unknown *int) (condition, error) {
	var he *platform.HTTPError
	switch {
	case err == nil, platform.Permanent(err):
		return condition{}, err
	case platform.FateUnknown(err):
		if *unknown++; *unknown > 1 {
			return condition{}, fmt.Errorf("%w: %w", errFateUnknown, err)
		}
	case errors.As(err, &he) && he.TenantOrgRequired():
		return condition{reason: reasonOrgIDMissing, cause: err}, err
	case errors.As(err, &he) && he.Status == http.StatusUnauthorized:
		return condition{reason: reasonTokenRefused, cause: err}, err
	case errors.As(err, &he) && (he.RateLimited() || he.RetryAfter > 0):
		return condition{reason: reasonRetryAfter, until: time.Now().Add(he.RetryAfter), cause: err}, err
	}
	return condition{reason: reasonPlatformDown, cause: err}, err
}

// uploadFiles uploads p's files that have no URI yet (uploadNew). An upload the platform refuses
// for good (413, 400) does not cost the reply: the files are dropped from it, saying so.
func (d *replies) uploadFiles(ctx context.Context, log *zap.Logger, p *ledger.Reply) error {
	err := d.uploadNew(ctx, log, p)
	if err != nil && platform.Permanent(err) {
		d.dropFiles(log, p, "the platform refused the upload ("+refusalReason(routeNotify, err)+")", err)
		return nil
	}
	return err
}

// peerFileParts are p's files as A2A file parts; copies that cannot be read are dropped from the
// reply, saying so.
func (d *replies) peerFileParts(log *zap.Logger, p *ledger.Reply) []any {
	parts, err := fileParts(p.Files)
	if err != nil {
		d.dropFiles(log, p, "their copies cannot be read", err)
		return nil
	}
	return parts
}

// peerSendFailed is the error of a failed A2A send of p. A send with files that the platform
// refused as too large (413) goes again without them, saying so, rather than not at all.
func (d *replies) peerSendFailed(log *zap.Logger, p *ledger.Reply, withFiles bool, err error) error {
	var he *platform.HTTPError
	if !withFiles || !errors.As(err, &he) || he.Status != http.StatusRequestEntityTooLarge {
		return err
	}
	d.dropFiles(log, p, "the platform refused them as too large (413)", err)
	return errors.New("a2a send: the files made the reply too large (HTTP 413); sending it again without them")
}

// uploadNew uploads p's files that have no URI yet in one chat/uploads request and stores the
// URIs in the ledger (written) before the caller's notify: a notify that fails, or a crash
// after the upload, never uploads them again.
func (d *replies) uploadNew(ctx context.Context, log *zap.Logger, p *ledger.Reply) error {
	var todo []int
	for i, f := range p.Files {
		if f.URI == "" {
			todo = append(todo, i)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	files := make([]platform.UploadFile, len(todo))
	for k, i := range todo {
		f := p.Files[i]
		files[k] = platform.UploadFile{Name: f.Name, MimeType: f.MimeType, Path: f.Path}
	}
	got, err := d.client.ChatUpload(ctx, p.Route.Workspace, files)
	if err != nil {
		return err
	}
	if len(got) != len(todo) {
		return fmt.Errorf("chat upload: the platform answered %d files for %d sent", len(got), len(todo))
	}
	// A copy: the ledger holds the pending reply with the same slice, and may be encoding it
	// for the state file right now.
	p.Files = slices.Clone(p.Files)
	for k, i := range todo {
		p.Files[i].URI = got[k].URI
		if got[k].Name != "" {
			p.Files[i].Name = got[k].Name
		}
		if got[k].MimeType != "" {
			p.Files[i].MimeType = got[k].MimeType
		}
	}
	d.ledger.SetPending(*p)
	d.state.sync(log, "storing the uploaded files' URIs before the notify that names them")
	log.Info("files uploaded for the reply", zap.Int("files", len(todo)))
	return nil
}

// dropFiles takes the files out of p, which cannot go (why), and says so in its text: the reply
// goes without them rather than not at all. The change is stored before the next attempt.
func (d *replies) dropFiles(log *zap.Logger, p *ledger.Reply, why string, err error) {
	names := make([]string, 0, len(p.Files))
	for _, f := range p.Files {
		names = append(names, f.Name)
	}
	d.c.filesRefused.Add(int64(len(p.Files)))
	log.Warn("the reply's files cannot go; sending the reply without them",
		zap.Strings("files", names), zap.String("reason", why), zap.Error(err))
	p.Text += "\n\n" + chatfiles.NotSent(names, why)
	p.Files = nil
	d.ledger.SetPending(*p)
	d.state.sync(log, "storing the reply without the files the platform refused")
}

// attachments are the notify attachments of uploaded files.
func attachments(files []ledger.SentFile) []platform.UploadedFile {
	out := make([]platform.UploadedFile, 0, len(files))
	for _, f := range files {
		out = append(out, platform.UploadedFile{URI: f.URI, Name: f.Name, MimeType: f.MimeType, Size: f.Size})
	}
	return out
}

// fileParts are a peer reply's files as A2A file parts with the bytes inline.
func fileParts(files []ledger.SentFile) ([]any, error) {
	parts := make([]any, 0, len(files))
	for _, f := range files {
		b, err := os.ReadFile(f.Path)
		if err != nil {
			return nil, fmt.Errorf("read the copy of %s: %w", f.Name, err)
		}
		parts = append(parts, map[string]any{"kind": "file", "file": map[string]any{
			"name": f.Name, "mimeType": f.MimeType, "bytes": base64.StdEncoding.EncodeToString(b)}})
	}
	return parts, nil
}
