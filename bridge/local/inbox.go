package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/bridge/chat"
	"github.com/molecule-ai/codex-warm/internal/chatfiles"
	"github.com/molecule-ai/codex-warm/internal/health"
	"github.com/molecule-ai/codex-warm/internal/secretset"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// chatKeyPattern is what the local inbox accepts as a chat key: Molecule-style keys
// ("canvas:<ws>", "peer:<id>") and simple names. The key names a codex thread and ends up in
// logs and sessions.json, so it is kept short and printable.
var chatKeyPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}$`)

// DefaultRetryAfter is the Retry-After the local inbox sends with a 503.
const DefaultRetryAfter = 5 * time.Second

// DefaultBodyTimeout bounds reading one local inbox request body.
const DefaultBodyTimeout = 15 * time.Second

// DefaultWriteTimeout bounds one write of an answer to a client (a plain answer, or one event of
// a stream): 30 s is ample for a client that reads at all (an 8 MiB answer at 300 KB/s) and
// short beside the turns the connection otherwise waits for.
const DefaultWriteTimeout = 30 * time.Second

// Config configures the local HTTP inbox.
type Config struct {
	// Answerer runs the turns; required.
	Answerer chat.Answerer
	// Controls carries out chat commands (/stop, /new, /status, /help); nil turns them off, and
	// such messages go to codex as text.
	Controls chat.Controls
	// Chats answers GET /v1/chats/{chatKey} with the chat's state; nil: 404 there.
	Chats ChatStatusSource
	// Logger; nil means no logging.
	Logger *zap.Logger
	// MaxTextBytes caps a message's text; longer text is refused with 413 (the caller can split
	// it; silently cutting a direct request would hide the problem). Default chat.DefaultMaxTextBytes.
	MaxTextBytes int
	// MaxBodyBytes caps the request body; default 6×MaxTextBytes+4 KiB (JSON escaping can grow
	// text up to six times).
	MaxBodyBytes int64
	// RetryAfter is sent with 503 answers; default DefaultRetryAfter.
	RetryAfter time.Duration
	// Token, when set, must come as "Authorization: Bearer <token>" on every request (401
	// otherwise). It is what makes a listener beyond loopback safe: see CheckListenAddress.
	Token string
	// AllowedHosts are Host header names accepted besides loopback names and addresses (the
	// configured listen host). Any other Host is refused with 421: a DNS-rebinding page reaches a
	// loopback port under its own host name.
	AllowedHosts []string
	// AllowedOrigins are Origin header values accepted (scheme://host[:port], exact). A request
	// with any other Origin is refused with 403: browsers send Origin, the inbox's callers do not.
	AllowedOrigins []string
	// BodyTimeout bounds reading one request body, from the end of its headers; a slower body
	// gets 408 and the connection is closed. Default DefaultBodyTimeout.
	BodyTimeout time.Duration
	// WriteTimeout bounds each write of an answer: a plain answer, or one event of a stream,
	// must reach the client's socket within it from the write's start, or the connection is
	// closed. It bounds how long a client that stops reading holds a connection, and the answer's
	// memory, once its turn ended. Default DefaultWriteTimeout.
	WriteTimeout time.Duration
	// WorkDir is where codex works: a chat's files are sent from its folder there
	// (chatfiles.Folder). Empty: the agent's send_file calls are refused.
	WorkDir string
	// Secrets is the daemon's one secret set: a file holding any of its values is never sent,
	// and every answer and event is redacted with it (redactWriter). Nil: neither.
	Secrets *secretset.Set
	// MaxFileBytes bounds the files of one reply (inline in its JSON), MaxFiles their number.
	// Defaults DefaultMaxFileBytes, DefaultMaxFiles.
	MaxFileBytes int64
	MaxFiles     int
	// Ready answers the readiness probe (GET /v1/readyz and /readyz): the daemon's
	// health.Readiness. Nil means ready whenever the inbox answers.
	Ready http.Handler
}

// Message is the body of POST /v1/chats/{chatKey}/messages.
type Message struct {
	Text string `json:"text"`
}

// Reply is the 200 answer: the turn ran (completed, failed or interrupted). Text is what a
// platform user would see (for a failed turn: "codex failed (status failed): ..."); Status and
// Error are codex's own.
type Reply struct {
	Text       string `json:"text"`
	ChatKey    string `json:"chat_key"`
	ThreadID   string `json:"thread_id"`
	TurnID     string `json:"turn_id"`
	Status     string `json:"status"`
	DurationMS int64  `json:"duration_ms"`
	Error      string `json:"error,omitempty"`
	// Steered is true when the message was added to the chat's running turn (--busy steer):
	// the reply is that turn's, which answered both.
	Steered bool `json:"steered,omitempty"`
	// Files are the files the agent sent with the reply (send_file), content inline.
	Files []File `json:"files,omitempty"`
}

// Reply.Status values besides codex's turn statuses.
const (
	// StatusCommand answers a chat command (/stop, /new, /status, /help).
	StatusCommand = "command"
	// StatusStopped answers a message the chat's /stop interrupted or dropped.
	StatusStopped = "stopped"
	// StatusSuperseded answers a message whose turn a newer message interrupted (--busy
	// interrupt).
	StatusSuperseded = "superseded"
)

// ErrorReply is every non-200 answer.
type ErrorReply struct {
	Error string `json:"error"`
	// Watchdog names the watchdog that retired the session (504 only).
	Watchdog string `json:"watchdog,omitempty"`
	// Rule names the request check that refused the request: "host", "token", "origin",
	// "content-type", "body", "body-timeout" or "connections". Empty for answers about the turn itself.
	Rule string `json:"rule,omitempty"`
	// ResetsAt is when the account's usage limit resets (429 only): send the message again then.
	ResetsAt time.Time `json:"resets_at,omitzero"`
}

// Inbox is an http.Handler for a loopback listener:
//
//	POST /v1/chats/{chatKey}/messages  {"text": "..."} → 200 Reply once the turn ended
//	GET  /v1/chats/{chatKey}/approval  → 200 Approval the chat's turn waits for, or 404
//	GET  /v1/healthz                   → 200 {"status":"ok"} (also /healthz)
//	GET  /v1/readyz                    → 200, or 503 with the reason (also /readyz; see Ready)
//
// Errors are JSON ErrorReply: 400 bad JSON, empty text or bad chat key; 404 unknown path; 405
// wrong method; 413 body or text too large; 503 + Retry-After when the pool is busy or shutting
// down; 504 when a watchdog retired the session (the message should be sent again); 502 when
// codex cannot run for the key (crash loop, with Retry-After; not logged in); 500 otherwise.
//
// The handler calls Answerer.Submit directly: the supervisor already runs one key's turns in
// FIFO order and different keys in parallel, and the caller waits for the answer, so the
// Molecule inbox's durable ledger would add nothing (the caller retries on error).
type Inbox struct {
	cfg     Config
	log     *zap.Logger
	mux     *http.ServeMux
	guarded guarded
	// waiting are the connections of messages a reload handed over (handover.go).
	waiting *waitingSet
	// sent and refused count the files of replies (files.go).
	sent, refused atomic.Int64
}

// New returns the handler.
func New(cfg Config) (*Inbox, error) {
	if cfg.Answerer == nil {
		return nil, errors.New("local inbox: no answerer configured")
	}
	if cfg.MaxTextBytes <= 0 {
		cfg.MaxTextBytes = chat.DefaultMaxTextBytes
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 6*int64(cfg.MaxTextBytes) + 4<<10
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = DefaultRetryAfter
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = DefaultBodyTimeout
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.MaxFileBytes <= 0 {
		cfg.MaxFileBytes = DefaultMaxFileBytes
	}
	if cfg.MaxFiles <= 0 {
		cfg.MaxFiles = DefaultMaxFiles
	}
	if cfg.Ready == nil {
		cfg.Ready = health.NewReadiness(health.Config{})
	}
	h := &Inbox{cfg: cfg, log: cfg.Logger.Named("bridge.local"), mux: http.NewServeMux(), waiting: newWaitingSet()}
	h.guarded = guarded{g: newGuard(cfg.Token, cfg.AllowedHosts, cfg.AllowedOrigins), realm: "codex-warm inbox", log: h.log, next: h.mux}
	h.mux.HandleFunc("POST /v1/chats/{chatKey}/messages", h.postMessage)
	h.mux.HandleFunc("/v1/chats/{chatKey}/messages", methodNotAllowed("POST"))
	h.mux.HandleFunc("GET /v1/chats/{chatKey}", h.getChat)
	h.mux.HandleFunc("/v1/chats/{chatKey}", methodNotAllowed("GET, HEAD"))
	h.mux.HandleFunc("GET /v1/chats/{chatKey}/approval", h.getApproval)
	h.mux.HandleFunc("/v1/chats/{chatKey}/approval", methodNotAllowed("GET, HEAD"))
	// The unversioned names are the probes' usual ones, shared with other listeners.
	for _, p := range []string{"/v1/healthz", "/healthz"} {
		h.mux.HandleFunc("GET "+p, health.Live)
		h.mux.HandleFunc(p, methodNotAllowed("GET, HEAD"))
	}
	for _, p := range []string{"/v1/readyz", "/readyz"} {
		h.mux.Handle("GET "+p, cfg.Ready)
		h.mux.HandleFunc(p, methodNotAllowed("GET, HEAD"))
	}
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, ErrorReply{Error: "no such endpoint: " + r.URL.Path})
	})
	return h, nil
}

// ServeHTTP implements http.Handler. Every request passes the guard (Host, token, Origin,
// content type) before any handler sees it, and every write of its answer has a deadline
// (Config.WriteTimeout) and is redacted (Config.Secrets).
func (h *Inbox) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.guarded.ServeHTTP(h.redacting(newDeadlineWriter(w, h.cfg.WriteTimeout)), r)
}

// methodNotAllowed answers 405 in JSON (ServeMux's own 405 is plain text).
func methodNotAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		writeJSON(w, http.StatusMethodNotAllowed, ErrorReply{Error: fmt.Sprintf("method %s not allowed; use %s", r.Method, allow)})
	}
}

func (h *Inbox) postMessage(w http.ResponseWriter, r *http.Request) {
	key, ok := chatKeyOf(w, r)
	if !ok {
		return
	}
	log := h.log.WithLazy(zap.String("chat_key", key))
	body, status, le := h.readMessage(w, r)
	if status != 0 {
		writeJSON(w, status, le)
		return
	}
	if strings.TrimSpace(body.Text) == "" {
		writeJSON(w, http.StatusBadRequest, ErrorReply{Error: "text is empty"})
		return
	}
	if len(body.Text) > h.cfg.MaxTextBytes {
		writeJSON(w, http.StatusRequestEntityTooLarge, ErrorReply{Error: fmt.Sprintf("text is %d bytes; the limit is %d", len(body.Text), h.cfg.MaxTextBytes)})
		return
	}

	sse := wantsEventStream(r)
	if sse {
		es := startEventStream(w)
		defer es.finish()
		w, r = es, r.WithContext(supervisor.WithProgress(r.Context(), es.observe))
	}
	if cmd, ok := chat.ParseCommand(body.Text); ok && h.cfg.Controls != nil {
		// Not through Submit: a command must not wait behind the chat's running turn.
		text := chat.RunCommand(r.Context(), h.cfg.Controls, key, cmd, 0)
		log.Info("chat command", zap.String("command", cmd.Name))
		writeJSON(w, http.StatusOK, Reply{Text: text, ChatKey: key, Status: StatusCommand})
		return
	}

	start := time.Now()
	in := supervisor.Input{Text: body.Text}
	box := &fileBox{}
	in.CallTool = h.sendFileTool(key, box, log)
	var seq uint64
	if !sse {
		// A plain answer can be written by the next image of the daemon: the message gets an
		// id, so that its turn crosses a reload, and its connection is handed over with it.
		// An event stream has begun its answer; its turn keeps a reload waiting.
		in.MessageID, seq = h.waiting.newID()
	}
	var submitted func()
	if in.MessageID != "" {
		submitted = h.waiting.submitting()
	}
	reply, err := h.cfg.Answerer.SubmitInput(r.Context(), key, in)
	if errors.Is(err, supervisor.ErrHandedOver) && in.MessageID != "" &&
		h.waiting.hijack(w, Waiting{ChatKey: key, MessageID: in.MessageID, Text: body.Text, Seq: seq}, log) {
		submitted()
		return
	}
	if submitted != nil {
		submitted()
	}
	h.respond(w, r.Context().Err() != nil, log, key, start, reply, err, box)
}

// respond writes the answer of a message from its Submit result. gone says the caller went away.
func (h *Inbox) respond(w http.ResponseWriter, gone bool, log *zap.Logger, key string, start time.Time, reply supervisor.Reply, err error, box *fileBox) {
	oc := chat.Classify(reply, err)
	log = log.WithLazy(zap.Duration("took", time.Since(start)))
	if gone && oc != chat.OutcomeAnswered {
		log.Info("caller went away before the turn ended", zap.Error(err))
		writeJSON(w, http.StatusServiceUnavailable, ErrorReply{Error: "request canceled"})
		return
	}
	// What codex was not shown, could not restore, or was declined without asking the chat
	// (Reply.Notices).
	text := reply.WithNotices(chat.ReplyText(reply, err))
	var files []File
	if box != nil {
		text, files = box.take(text)
	}
	switch oc {
	case chat.OutcomeAnswered, chat.OutcomeTurnFailed, chat.OutcomeSuperseded:
		// A failed turn's files go with its note, and so do those of a turn a newer message
		// interrupted (--busy interrupt): nobody asked to drop its work, and the agent answering
		// the newer message in the same thread was told they would go.
	case chat.OutcomeStopped:
		// /stop asks for the work to end, not for what it had made so far: the answer names the
		// turn's files instead, and keeps the refusals (why a file did not come).
		text, files = withoutFiles(text, files, chatfiles.WhyStopped), nil
	default:
		// An error answer has no files: it names them, so that the caller knows what the turn
		// had made before it failed.
		text, files = withoutFiles(text, files, whyErrorAnswer), nil
	}
	switch oc {
	case chat.OutcomeAnswered, chat.OutcomeTurnFailed:
		dur := reply.Duration
		if dur <= 0 {
			dur = time.Since(start)
		}
		if oc == chat.OutcomeTurnFailed {
			log.Warn("turn failed; answered with codex's error", zap.String("status", reply.Status),
				zap.String("thread_id", reply.ThreadID), zap.String("turn_error", reply.Error), zap.Error(err))
		} else {
			log.Info("answered", zap.String("status", reply.Status), zap.String("thread_id", reply.ThreadID))
		}
		w.Header().Set("Server-Timing", serverTiming(dur, time.Since(start)))
		writeJSON(w, http.StatusOK, Reply{
			Text: text, ChatKey: key, ThreadID: reply.ThreadID, TurnID: reply.TurnID,
			Status: reply.Status, DurationMS: dur.Milliseconds(), Error: reply.Error, Steered: reply.Steered,
			Files: files,
		})
		h.sent.Add(int64(len(files)))
	case chat.OutcomeStopped:
		log.Info("stopped from the chat", zap.String("turn_id", reply.TurnID))
		writeJSON(w, http.StatusOK, Reply{Text: text, ChatKey: key, ThreadID: reply.ThreadID, TurnID: reply.TurnID, Status: StatusStopped})
	case chat.OutcomeSuperseded:
		log.Info("interrupted by a newer message", zap.String("turn_id", reply.TurnID))
		writeJSON(w, http.StatusOK, Reply{Text: text, ChatKey: key, ThreadID: reply.ThreadID, TurnID: reply.TurnID, Status: StatusSuperseded, Files: files})
		h.sent.Add(int64(len(files)))
	case chat.OutcomeModelUnreachable:
		// Not the caller's fault and not a failed turn: the service is away. The caller holds
		// the message; it is told when to send it again.
		log.Warn("the model service could not be reached", zap.Error(err))
		w.Header().Set("Retry-After", retryAfterSeconds(h.cfg.RetryAfter))
		writeJSON(w, http.StatusServiceUnavailable, ErrorReply{Error: text + " Please send it again in a minute.", Watchdog: supervisor.WatchdogModelUnreachable})
	case chat.OutcomeUsageLimit:
		// The caller holds the message (this inbox parks nothing): it is told when to send it.
		var ul *supervisor.UsageLimitError
		errors.As(err, &ul)
		log.Info("the account's usage limit is reached; told to send again after the reset", zap.Time("resets_at", ul.ResetsAt))
		w.Header().Set("Retry-After", retryAfterSeconds(time.Until(ul.ResetsAt)))
		writeJSON(w, http.StatusTooManyRequests, ErrorReply{Error: text, ResetsAt: ul.ResetsAt})
	case chat.OutcomeBusy, chat.OutcomeClosed:
		log.Warn("busy", zap.Error(err))
		w.Header().Set("Retry-After", retryAfterSeconds(h.cfg.RetryAfter))
		writeJSON(w, http.StatusServiceUnavailable, ErrorReply{Error: text})
	case chat.OutcomeWatchdog:
		var wd *supervisor.WatchdogError
		errors.As(err, &wd)
		log.Warn("watchdog retired the session", zap.Error(err))
		writeJSON(w, http.StatusGatewayTimeout, ErrorReply{Error: text, Watchdog: wd.Watchdog})
	case chat.OutcomeCrashLoop:
		var cl *supervisor.CrashLoopError
		errors.As(err, &cl)
		log.Warn("codex keeps failing for this chat", zap.Error(err))
		w.Header().Set("Retry-After", retryAfterSeconds(time.Until(cl.RetryAt)))
		writeJSON(w, http.StatusBadGateway, ErrorReply{Error: text})
	case chat.OutcomeAuth:
		log.Error("codex is not logged in", zap.Error(err), zap.String("turn_error", reply.Error))
		writeJSON(w, http.StatusBadGateway, ErrorReply{Error: text})
	default:
		log.Error("submit failed", zap.Error(err))
		writeJSON(w, http.StatusInternalServerError, ErrorReply{Error: text})
	}
}

// readMessage reads and strictly parses the body within BodyTimeout. Strict means what
// encoding/json would let through silently is refused: data after the object, a member named
// twice (which of two "text"s ran would depend on the parser), invalid UTF-8. Unknown members
// are tolerated so callers can add fields. A non-zero status is the refusal to send.
func (h *Inbox) readMessage(w http.ResponseWriter, r *http.Request) (Message, int, ErrorReply) {
	rc := http.NewResponseController(w)
	// The deadline covers the body only and is lifted before the turn: an http.Server
	// ReadTimeout would also cancel the request context of every turn longer than it.
	_ = rc.SetReadDeadline(time.Now().Add(h.cfg.BodyTimeout))
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	var msg Message
	if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
		return msg, http.StatusRequestEntityTooLarge, ErrorReply{Rule: RuleBody, Error: fmt.Sprintf("request body exceeds %d bytes", mbe.Limit)}
	}
	if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
		// The connection cannot be reused: part of the body may still be on its way.
		w.Header().Set("Connection", "close")
		h.log.Warn("request body not received in time; connection closed", zap.Duration("body_timeout", h.cfg.BodyTimeout),
			zap.String("remote", r.RemoteAddr), zap.Int("bytes_read", len(raw)))
		return msg, http.StatusRequestTimeout, ErrorReply{Rule: RuleBodyTimeout, Error: fmt.Sprintf("request body not received within %s", h.cfg.BodyTimeout)}
	}
	if err != nil {
		return msg, http.StatusBadRequest, ErrorReply{Rule: RuleBody, Error: "reading request body: " + err.Error()}
	}
	_ = rc.SetReadDeadline(time.Time{})
	if err := jsonv2.Unmarshal(raw, &msg); err != nil {
		return msg, http.StatusBadRequest, ErrorReply{Rule: RuleBody, Error: "request body must be a JSON object {\"text\": \"...\"}: " + err.Error()}
	}
	return msg, 0, ErrorReply{}
}

// retryAfterSeconds formats d as whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) string {
	return strconv.Itoa(int(max(1, math.Ceil(d.Seconds()))))
}

// chatKeyOf reads the request's {chatKey}; an invalid one is answered 400 and ok is false.
func chatKeyOf(w http.ResponseWriter, r *http.Request) (key string, ok bool) {
	key = r.PathValue("chatKey")
	if !chatKeyPattern.MatchString(key) {
		writeJSON(w, http.StatusBadRequest, ErrorReply{Error: fmt.Sprintf("invalid chat key %q: it must match %s", chat.CapText(key, 64), chatKeyPattern)})
		return "", false
	}
	return key, true
}

// serverTiming is the Server-Timing header (W3C Server Timing) of an answer: the turn as codex
// ran it (turn/start to turn/completed, as the daemon's client saw it) and the message's whole
// time in the daemon, in milliseconds to the microsecond. duration_ms in the body is whole
// milliseconds; what the daemon adds to a turn is well under one, so a caller measuring it
// (the benchmark's "HTTP + supervisor" figure) takes it from here.
func serverTiming(turn, daemon time.Duration) string {
	return fmt.Sprintf("turn;dur=%.3f, daemon;dur=%.3f", float64(turn.Microseconds())/1000, float64(daemon.Microseconds())/1000)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"encode response"}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
