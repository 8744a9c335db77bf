// Package handoff is the document one image of the daemon gives the next when it re-executes
// itself in place (a reload): which inherited file descriptors are its listeners, its state
// lock and its codex children's pipes, and what the next image needs to go on with each child.
//
// The document is JSON in an anonymous file whose descriptor crosses the exec; the environment
// variable EnvFD names it. It is versioned: a daemon reads the versions in Readable and refuses
// any other with an *VersionError before it touches anything. docs/HANDOFF.md describes the
// format and the reload.
package handoff

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Version is the newest version this build writes. Version 2 adds Child.Turn: a child may be
// handed over in the middle of a turn, which a reader of version 1 would take for an idle
// child. Version 3 adds Child.Threads: a child may host several chats' threads
// (--threads-per-child), which a reader of version 2 would take for the first chat's alone,
// and resume the others' threads elsewhere while this child still holds them.
const Version = 3

// VersionUnshared is the version of a document without a shared child: it is written as
// version 2, so that an image of a build that knows no shared children still takes it.
const VersionUnshared = 2

// Readable are the versions this build reads.
var Readable = []int{1, 2, 3}

// EnvFD is the environment variable that names the handoff's file descriptor in the next image.
const EnvFD = "CODEX_WARM_HANDOFF_FD"

// EnvFallbackFD names, in the next image, a descriptor open on the previous image's executable.
// A next image that cannot take over (its handoff unreadable, its configuration refused)
// re-executes that file with the same handoff, so that the previous binary takes everything
// back instead of the daemon dying with its children.
const EnvFallbackFD = "CODEX_WARM_RELOAD_FALLBACK_FD"

// EnvGivenBack is set, to the reason, by a next image that gave the handoff back to the
// previous binary.
const EnvGivenBack = "CODEX_WARM_RELOAD_GIVEN_BACK"

// EnvQuietAt is when (Unix nanoseconds) the previous image stopped catching stop signals before
// its exec; the next image measures, from it, the window in which a SIGTERM ended the daemon.
const EnvQuietAt = "CODEX_WARM_RELOAD_QUIET_AT"

// maxDoc bounds the document read: pending bytes are at most a partial line per child.
const maxDoc = 1 << 30

// Doc is the handoff document.
type Doc struct {
	Version int `json:"version"`
	// WrittenBy is the version of the daemon that wrote it.
	WrittenBy string    `json:"written_by"`
	Written   time.Time `json:"written"`
	// Started is when the daemon's first image started; Reloads counts the reloads since,
	// this one included.
	Started time.Time `json:"started"`
	Reloads int       `json:"reloads"`
	// Attempts counts the reload attempts since the first start, refused ones too; Trigger is
	// what asked for this one ("SIGHUP", "control socket").
	Attempts int    `json:"attempts"`
	Trigger  string `json:"trigger"`
	// Executable is the path the daemon re-executes, read once when it first started.
	Executable string `json:"executable"`
	// Args is the previous image's argv, which a give-back runs it with again.
	Args []string `json:"args,omitempty"`
	// TakeoverTimeoutMS bounds the next image's takeover, from its reading of this document to
	// its serving: past it, an image that has not begun to take anything over gives everything
	// back, and one that has ends (0: the next image's default).
	TakeoverTimeoutMS int64 `json:"takeover_timeout_ms,omitempty"`
	// LockFD holds the state directory's flock (it belongs to the open file, which the exec
	// keeps).
	LockFD    int        `json:"lock_fd"`
	Listeners []Listener `json:"listeners,omitempty"`
	Children  []Child    `json:"children,omitempty"`
	// Waiting are the local inbox's callers waiting for answers of messages whose turns cross
	// (version 2), in the order the inbox received them.
	Waiting []Waiting `json:"waiting,omitempty"`
	// Env are the variables the first image read secrets from and then removed from its
	// environment, so that /proc/<pid>/environ never shows them; the next image sets them
	// again before it reads its configuration.
	Env map[string]string `json:"env,omitempty"`
	// ChatGPT is what the daemon's ChatGPT login manager knew beyond auth.json
	// (codexauth.Carried): the refresh tokens never to send again.
	ChatGPT json.RawMessage `json:"chatgpt,omitempty"`
	// Secrets is the daemon's secret set by source, each source's generations oldest first
	// (package secretset): an access token of a login rotated before the reload is still valid
	// after it, and must still never leave. An image that does not know the field starts its
	// set afresh; one that finds it missing does too.
	Secrets map[string][][]string `json:"secrets,omitempty"`
}

// Listener names one inherited listening socket.
type Listener struct {
	// Name is ListenerInbox, ListenerMetrics or ListenerControl.
	Name string `json:"name"`
	FD   int    `json:"fd"`
	Addr string `json:"addr"`
}

// Listener names.
const (
	ListenerInbox   = "inbox"
	ListenerMetrics = "metrics"
	ListenerControl = "control"
)

// Child is one idle codex child of a chat, handed over between two messages.
type Child struct {
	ChatKey  string    `json:"chat_key"`
	ThreadID string    `json:"thread_id"`
	PID      int       `json:"pid"`
	Started  time.Time `json:"started"`
	Turns    int       `json:"turns"`
	Stdin    int       `json:"stdin_fd"`
	Stdout   int       `json:"stdout_fd"`
	Stderr   int       `json:"stderr_fd"`
	// Pending is what was read from Stdout and not parsed: the start of the next line.
	Pending []byte `json:"pending,omitempty"`
	// Turn is the child's running turn (version 2); nil for an idle child.
	Turn *Turn `json:"turn,omitempty"`
	// Threads are the other chats whose threads live in this child (version 3): a shared
	// child is handed over with all its threads and their running turns.
	Threads []Thread `json:"threads,omitempty"`
}

// Thread is one more chat's thread in a shared child.
type Thread struct {
	ChatKey  string    `json:"chat_key"`
	ThreadID string    `json:"thread_id"`
	Started  time.Time `json:"started"`
	Turns    int       `json:"turns"`
	// Turn is the chat's running turn; nil for an idle thread.
	Turn *Turn `json:"turn,omitempty"`
}

// WriteVersion is the version d is written as: Version when a child is shared, else
// VersionUnshared.
func (d Doc) WriteVersion() int {
	for _, c := range d.Children {
		if len(c.Threads) > 0 {
			return Version
		}
	}
	return VersionUnshared
}

// Waiting is a caller of the local inbox waiting, on an HTTP/1.1 connection whose request was
// read and not answered (no byte of the answer written), for the answer of a message.
type Waiting struct {
	FD        int    `json:"fd"`
	ChatKey   string `json:"chat_key"`
	MessageID string `json:"message_id"`
	Text      string `json:"text"`
	Seq       uint64 `json:"seq"`
}

// Turn is a running turn handed over with its child.
type Turn struct {
	// MessageID is the message the turn answers (a Molecule row's activity id): its inbox
	// gives it again to the next image, which attaches it to the turn.
	MessageID      string `json:"message_id"`
	AskApprovalsOf string `json:"ask_approvals_of,omitempty"`
	// Approvals are the numbers of the turn's approvals waiting for a person, by JSON-RPC
	// request id.
	Approvals map[string]uint64 `json:"approvals,omitempty"`
	// DeadlineLeftMS is what remained of the turn deadline, in milliseconds (0: none).
	DeadlineLeftMS int64 `json:"deadline_left_ms,omitempty"`
	// State is the client's turn: thread and turn ids, start, notifications so far, the
	// approval requests unanswered with their JSON-RPC ids and params (appserver.TurnHandover).
	State json.RawMessage `json:"state"`
}

// FDs returns every descriptor the document hands over.
func (d Doc) FDs() []int {
	fds := []int{d.LockFD}
	for _, l := range d.Listeners {
		fds = append(fds, l.FD)
	}
	for _, c := range d.Children {
		fds = append(fds, c.Stdin, c.Stdout, c.Stderr)
	}
	for _, w := range d.Waiting {
		fds = append(fds, w.FD)
	}
	return fds
}

// VersionError is the refusal of a document of a version this build does not read.
type VersionError struct {
	Got      int
	Readable []int
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("handoff version %d is not one this daemon reads (%v)", e.Got, e.Readable)
}

// Write puts d in a new anonymous file and returns it, at offset 0, with close-on-exec set
// (Inherit clears it).
func Write(d Doc) (*os.File, error) {
	d.Version = d.WriteVersion()
	b, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("encode handoff: %w", err)
	}
	return WriteRaw(b)
}

// WriteRaw is Write of a document already encoded (a handoff given back as it was read). The
// file has mode 0: the descriptor reads it, but no process without CAP_DAC_OVERRIDE can open
// it again through /proc/<pid>/fd, even in the moments an image is dumpable (the document
// carries secrets).
func WriteRaw(b []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate("codex-warm-handoff", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("handoff file: %w", err)
	}
	f := os.NewFile(uintptr(fd), "codex-warm-handoff")
	if err := f.Chmod(0); err != nil {
		f.Close()
		return nil, fmt.Errorf("handoff file: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, fmt.Errorf("write handoff: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("rewind handoff: %w", err)
	}
	return f, nil
}

// Read decodes the document in r, refusing a version not in Readable (*VersionError).
func Read(r io.Reader) (Doc, error) {
	b, err := ReadRaw(r)
	if err != nil {
		return Doc{}, err
	}
	return Decode(b)
}

// ReadRaw reads an encoded document, bounded.
func ReadRaw(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxDoc))
	if err != nil {
		return nil, fmt.Errorf("read handoff: %w", err)
	}
	return b, nil
}

// Decode decodes an encoded document, refusing a version not in Readable (*VersionError).
func Decode(b []byte) (Doc, error) {
	var v struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return Doc{}, fmt.Errorf("decode handoff: %w", err)
	}
	if !slices.Contains(Readable, v.Version) {
		return Doc{}, &VersionError{Got: v.Version, Readable: Readable}
	}
	var d Doc
	if err := json.Unmarshal(b, &d); err != nil {
		return Doc{}, fmt.Errorf("decode handoff version %d: %w", v.Version, err)
	}
	return d, nil
}

// FromEnv returns the handoff file named by EnvFD (ok false when unset) and sets close-on-exec
// on it.
func FromEnv(getenv func(string) string) (f *os.File, ok bool, err error) {
	v := getenv(EnvFD)
	if v == "" {
		return nil, false, nil
	}
	fd, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || fd < 3 {
		return nil, true, fmt.Errorf("%s=%q is not a file descriptor", EnvFD, v)
	}
	syscall.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), "codex-warm-handoff"), true, nil
}

// Inherit clears close-on-exec on fds so that they cross the exec.
func Inherit(fds ...int) error {
	var errs []error
	for _, fd := range fds {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
			errs = append(errs, fmt.Errorf("clear close-on-exec of fd %d: %w", fd, err))
		}
	}
	return errors.Join(errs...)
}

// Reclaim sets close-on-exec on fds again: after a failed exec, or in the next image once it
// took them, so that they do not leak into the processes it starts.
func Reclaim(fds ...int) {
	for _, fd := range fds {
		syscall.CloseOnExec(fd)
	}
}

// CloseOnExec reports whether fd has close-on-exec set.
func CloseOnExec(fd int) (bool, error) {
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	if err != nil {
		return false, err
	}
	return flags&unix.FD_CLOEXEC != 0, nil
}

// Preflight is what a daemon binary prints for the hidden preflight subcommand: the old image
// runs the new binary with it before re-executing, and refuses a binary that does not print
// it or cannot read Version.
type Preflight struct {
	Program  string `json:"program"`
	Version  string `json:"version"`
	Readable []int  `json:"handoff_readable"`
}

// PreflightProgram is Preflight.Program of a codex-warm daemon.
const PreflightProgram = "codex-warm"

// CheckPreflight decodes a preflight answer and says why the binary cannot take over a handoff
// of version need (Version for a daemon that shares children, else VersionUnshared), or
// returns its Preflight.
func CheckPreflight(out []byte, need int) (Preflight, error) {
	var p Preflight
	if err := json.Unmarshal(out, &p); err != nil {
		return p, fmt.Errorf("its preflight answer is not JSON (%v): %q", err, clip(out, 200))
	}
	if p.Program != PreflightProgram {
		return p, fmt.Errorf("its preflight answer names program %q, not %q", p.Program, PreflightProgram)
	}
	if !slices.Contains(p.Readable, need) {
		return p, &VersionError{Got: need, Readable: p.Readable}
	}
	return p, nil
}

func clip(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
