package chatfiles

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// ToolName is the name of the client-defined tool an agent sends a file with.
const ToolName = "send_file"

// Tool is the send_file tool as offered on thread/start.
func Tool() protocol.DynamicToolSpec {
	return protocol.DynamicToolSpec{
		Type: "function",
		Name: ToolName,
		Description: "Send a file to the person (or agent) you are chatting with; it arrives as an attachment " +
			"with your reply when the turn ends. Only a regular file inside this chat's own folder can be " +
			"sent (the folder named in the message's attachment notes, <working directory>/.chats/<chat>/): " +
			"write the file there first. A path relative to that folder or absolute inside it. Files that " +
			"hold credentials are refused.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{` +
			`"path":{"type":"string","description":"the file, relative to the chat's folder or absolute inside it"},` +
			`"caption":{"type":"string","description":"optional words about the file"}},` +
			`"required":["path"],"additionalProperties":false}`),
	}
}

// Args are send_file's arguments.
type Args struct {
	Path    string `json:"path"`
	Caption string `json:"caption"`
}

// ParseArgs reads send_file's arguments as the model wrote them.
func ParseArgs(raw json.RawMessage) (Args, error) {
	var a Args
	if err := json.Unmarshal(raw, &a); err != nil {
		return Args{}, fmt.Errorf("send_file arguments are not {\"path\": ..., \"caption\": ...}: %w", err)
	}
	if strings.TrimSpace(a.Path) == "" {
		return Args{}, errors.New("send_file needs a path")
	}
	return a, nil
}

// Secrets lists what must never leave: tokens and keys the daemon holds. It is asked at every
// Copy, so a rotated token is known at once.
type Secrets interface {
	Secrets() []string
}

// SecretList is a fixed Secrets.
type SecretList []string

// Secrets returns the list.
func (l SecretList) Secrets() []string { return l }

// Limits bound what Copy takes: a file's own limit and, when the files of one reply share a
// budget, what is left of it. A file over them is refused naming the one that applies, so the
// agent knows whether a smaller file, or none more in this reply, would go.
type Limits struct {
	// MaxFileBytes is the largest file sent; 0 means no file at all.
	MaxFileBytes int64
	// ReplyBytes is the budget for all the files of one reply; 0 means there is none.
	ReplyBytes int64
	// ReplyUsed is what the reply's files taken before this one hold of ReplyBytes.
	ReplyUsed int64
}

// Max is the most the next file may hold, and whether what is left of the reply's budget, rather
// than a file's own limit, sets it.
func (l Limits) Max() (n int64, byReply bool) {
	n = max(l.MaxFileBytes, 0)
	if l.ReplyBytes > 0 {
		if left := max(l.ReplyBytes-l.ReplyUsed, 0); left <= n {
			return left, true
		}
	}
	return n, false
}

// limitText names the limit Max sets, for a person.
func (l Limits) limitText() string {
	n, byReply := l.Max()
	switch {
	case !byReply:
		return "the limit of " + bytesText(n) + " a file"
	case l.ReplyUsed == 0:
		return "this reply's budget of " + bytesText(l.ReplyBytes) + " for files"
	}
	return "the " + bytesText(n) + " left of this reply's budget of " + bytesText(l.ReplyBytes) + " for files"
}

func bytesText(n int64) string {
	if n == 1 {
		return "1 byte"
	}
	return fmt.Sprintf("%d bytes", n)
}

// Refusal says why a file may not leave. Path is the path as the agent named it; Kind classifies
// the reason, Reason says it to a person. Its text goes to the model and into the reply, so to the
// chat's people and peer agents: it never names a path of the host's beyond Path.
type Refusal struct {
	Path   string
	Kind   RefusalKind
	Reason string
	// Err is the failure behind the refusal, when there is one, naming the host's paths: for the
	// daemon's log, never part of Error.
	Err error
}

// RefusalKind classifies a Refusal.
type RefusalKind string

// Refusal kinds.
const (
	RefusedOutside    RefusalKind = "outside"     // not beneath the chat's folder
	RefusedLink       RefusalKind = "link"        // a symbolic link on the way or at the end
	RefusedMissing    RefusalKind = "missing"     // no such file
	RefusedNotRegular RefusalKind = "not_regular" // a directory, FIFO, device, socket
	RefusedHardLinks  RefusalKind = "hard_links"  // more than one name
	RefusedTooLarge   RefusalKind = "too_large"   // over Limits (a file's own, or the reply's budget)
	RefusedSecret     RefusalKind = "secret"      // holds a credential of the daemon
	RefusedOther      RefusalKind = "other"       // cannot be opened or read; the caller's own limits
)

func (r *Refusal) Error() string { return fmt.Sprintf("%s not sent: %s", r.Path, r.Reason) }

// Unwrap returns Err.
func (r *Refusal) Unwrap() error { return r.Err }

// WhyStopped is why a turn the chat stopped (/stop) sends none of the files it had taken: the
// person asked for the work to end, not for what it had made so far.
const WhyStopped = "the turn was stopped"

// NotSent is the note a reply carries for files the agent was told would go and that do not:
// "[report.pdf, data.csv not sent: why]", in the shape of a Refusal's.
func NotSent(names []string, why string) string {
	return "[" + strings.Join(names, ", ") + " not sent: " + why + "]"
}

// Info describes a file Copy copied.
type Info struct {
	// Name is the file's base name.
	Name string
	Size int64
	// MimeType is type/subtype, from the name's extension or else sniffed from the content.
	MimeType string
}

// minSecretLen keeps a short "secret" from refusing every file that happens to contain it; the
// tokens it guards are far longer.
const minSecretLen = 8

// Copy opens name beneath dir (the chat's folder) and copies it into w, as described in the
// package doc. Whatever w got before a refusal must be thrown away by the caller. A *Refusal
// names a file that may not leave, in words fit for the chat; any other error is a failure to
// read the file or to write w, and names the host's paths: it is for the daemon's log.
func Copy(dir, name string, lim Limits, sec Secrets, w io.Writer) (Info, error) {
	refuse := func(kind RefusalKind, why string) (Info, error) {
		return Info{}, &Refusal{Path: name, Kind: kind, Reason: why}
	}
	refuseFor := func(kind RefusalKind, why string, cause error) (Info, error) {
		return Info{}, &Refusal{Path: name, Kind: kind, Reason: why, Err: cause}
	}
	outside := func() (Info, error) {
		return refuseFor(RefusedOutside, "it is outside this chat's folder", fmt.Errorf("%s is not beneath %s", name, dir))
	}
	rel := name
	if filepath.IsAbs(name) {
		r, err := filepath.Rel(dir, name)
		if err != nil {
			return outside()
		}
		rel = r
	}
	// openat2 below is the guard; this only gives the right reason for a path that climbs out
	// through a folder that is not there, which openat2 would call missing.
	if c := filepath.Clean(rel); c == ".." || strings.HasPrefix(c, "../") {
		return outside()
	}
	full := filepath.Join(dir, rel)
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return refuseFor(RefusedOther, fmt.Sprintf("this chat's folder cannot be opened (%v)", err), &fs.PathError{Op: "open", Path: dir, Err: err})
	}
	defer unix.Close(dfd)
	// O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below as not regular.
	fd, err := unix.Openat2(dfd, rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOCTTY,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		cause := &fs.PathError{Op: "openat2", Path: full, Err: err}
		switch {
		case errors.Is(err, unix.EXDEV):
			return refuseFor(RefusedOutside, "it is outside this chat's folder", cause)
		case errors.Is(err, unix.ELOOP):
			return refuseFor(RefusedLink, "it is, or lies behind, a symbolic link", cause)
		case errors.Is(err, unix.ENOENT):
			return refuseFor(RefusedMissing, "there is no such file in this chat's folder", cause)
		}
		return refuseFor(RefusedOther, fmt.Sprintf("it cannot be opened (%v)", err), cause)
	}
	defer unix.Close(fd)
	limit, _ := lim.Max()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return Info{}, fmt.Errorf("stat %s: %w", full, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return refuse(RefusedNotRegular, "it is not a regular file")
	case st.Nlink != 1:
		return refuse(RefusedHardLinks, fmt.Sprintf("it has %d hard links (a file with another name elsewhere is not sent)", st.Nlink))
	case st.Size > limit:
		return refuse(RefusedTooLarge, "it is "+bytesText(st.Size)+", over "+lim.limitText())
	}
	var secrets [][]byte
	longest := 0
	if sec != nil {
		for _, s := range sec.Secrets() {
			if len(s) >= minSecretLen {
				secrets = append(secrets, []byte(s))
				longest = max(longest, len(s))
			}
		}
	}
	var (
		n     int64
		head  []byte
		tail  []byte
		chunk = make([]byte, 64<<10)
	)
	for {
		k, rerr := unix.Read(fd, chunk)
		if k > 0 {
			b := chunk[:k]
			if n+int64(k) > limit {
				return refuse(RefusedTooLarge, "it grew over "+lim.limitText()+" while being read")
			}
			// A secret may straddle two reads: search the end of the last read with this one.
			win := append(tail, b...)
			for _, s := range secrets {
				if bytes.Contains(win, s) {
					return refuse(RefusedSecret, "it contains a credential of this daemon (a token or key); files holding one are never sent")
				}
			}
			if keep := longest - 1; keep > 0 {
				tail = append(tail[:0], win[max(0, len(win)-keep):]...)
			}
			if len(head) < 512 {
				head = append(head, b[:min(len(b), 512-len(head))]...)
			}
			if _, err := w.Write(b); err != nil {
				return Info{}, fmt.Errorf("copy %s: %w", full, err)
			}
			n += int64(k)
		}
		if rerr == unix.EINTR || rerr == unix.EAGAIN {
			continue
		}
		if rerr != nil {
			return Info{}, fmt.Errorf("read %s: %w", full, rerr)
		}
		if k == 0 {
			break
		}
	}
	base := filepath.Base(rel)
	return Info{Name: base, Size: n, MimeType: mimeOf(base, head)}, nil
}

// mimeOf is the type of a file called name that starts with head, as type/subtype.
func mimeOf(name string, head []byte) string {
	t := mime.TypeByExtension(strings.ToLower(filepath.Ext(name)))
	if t == "" {
		t = http.DetectContentType(head)
	}
	if mt, _, err := mime.ParseMediaType(t); err == nil {
		return mt
	}
	return "application/octet-stream"
}
